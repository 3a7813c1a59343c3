//! `tusk upgrade stage-old`: this image's PostgreSQL, copied so that it runs
//! from another image.
//!
//! Debian's builds (the official images') find their share and module
//! directories relative to the running executable: with the programs in
//! `/usr/lib/postgresql/NN/bin`, the share files are `../../../share/
//! postgresql/NN` from there and the modules `../lib`. So the staged copy
//! mirrors those paths under the destination. The old and new images may be
//! different Debian releases, so the shared libraries the programs and
//! modules need, except glibc's own (the new image's newer glibc runs old
//! programs), are copied into `<dest>/lib-deps`; `<dest>/bin` holds one small
//! script per program that runs it with `LD_LIBRARY_PATH` set there, so
//! only the old programs (and what they start) see those libraries, never
//! the new ones pg_upgrade runs.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use super::{Error, child, command, version};

/// glibc's libraries (by soname prefix): never staged, the running image's
/// own must be used with its own loader.
const GLIBC: &[&str] = &[
    "ld-linux",
    "linux-vdso",
    "libc.so",
    "libm.so",
    "libmvec.so",
    "libpthread.so",
    "libdl.so",
    "librt.so",
    "libresolv.so",
    "libutil.so",
    "libanl.so",
    "libnsl.so.1",
    "libBrokenLocale.so",
    "libnss_",
    "libthread_db.so",
    "libc_malloc_debug.so",
];

/// Module files not staged: the JIT provider pulls in all of LLVM (hundreds
/// of MB), and PostgreSQL silently runs without JIT when it is absent.
const SKIPPED_MODULES: &[&str] = &["llvmjit.so", "llvmjit_types.bc", "bitcode"];

/// The image's PostgreSQL programs: PATH (the official images put the
/// major's bin directory there), else `pg_config --bindir`.
pub fn find_bindir() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("postgres").is_file() && dir.join("initdb").is_file() {
                return Some(dir);
            }
        }
    }
    let output = std::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    (output.status.success() && dir.join("postgres").is_file()).then_some(dir)
}

/// Where Debian's layout puts the modules and share files of the programs
/// in `bindir` (`<prefix>/lib/postgresql/NN/bin`).
pub fn debian_layout(bindir: &Path) -> Option<(PathBuf, PathBuf)> {
    let major_dir = bindir.parent()?;
    let major = major_dir.file_name()?.to_str()?;
    let postgresql = major_dir.parent()?;
    let lib = postgresql.parent()?;
    if bindir.file_name()? != "bin"
        || postgresql.file_name()? != "postgresql"
        || lib.file_name()? != "lib"
    {
        return None;
    }
    let prefix = lib.parent()?;
    Some((
        major_dir.join("lib"),
        prefix.join("share").join("postgresql").join(major),
    ))
}

/// `dest` joined with absolute `path` (its root dropped).
fn under(dest: &Path, path: &Path) -> PathBuf {
    dest.join(
        path.components()
            .filter(|c| !matches!(c, Component::RootDir | Component::Prefix(_)))
            .collect::<PathBuf>(),
    )
}

pub async fn stage_old(bindir: Option<&Path>, dest: &Path) -> Result<String, Error> {
    let bindir = match bindir {
        Some(dir) => dir.to_owned(),
        None => find_bindir().ok_or_else(|| {
            Error::Refused("cannot find this image's PostgreSQL programs (PATH, pg_config)".into())
        })?,
    };
    let bindir = bindir
        .canonicalize()
        .map_err(Error::io("resolve", &bindir))?;
    let major = version::bindir_major(&bindir)?;
    let (libdir, sharedir) = debian_layout(&bindir).ok_or_else(|| {
        Error::Refused(format!(
            "{} is not laid out as <prefix>/lib/postgresql/NN/bin (the official images' layout)",
            bindir.display()
        ))
    })?;
    empty(dest)?;
    for dir in [&bindir, &libdir, &sharedir] {
        copy_tree(dir, &under(dest, dir))?;
    }
    // Every ELF file staged, by its original path: what it needs is resolved
    // in this image.
    let mut elves = Vec::new();
    for dir in [&bindir, &libdir] {
        elf_files(dir, &mut elves)?;
    }
    let mut needed: BTreeMap<String, PathBuf> = BTreeMap::new();
    for file in &elves {
        for (soname, path) in libraries(file).await? {
            if !is_glibc(&soname) {
                needed.entry(soname).or_insert(path);
            }
        }
    }
    let deps = dest.join("lib-deps");
    std::fs::create_dir_all(&deps).map_err(Error::io("create", &deps))?;
    for (soname, path) in &needed {
        let target = deps.join(soname);
        std::fs::copy(path, &target).map_err(Error::io("copy", path))?;
    }
    let wrappers = dest.join("bin");
    std::fs::create_dir_all(&wrappers).map_err(Error::io("create", &wrappers))?;
    let staged_bin = under(dest, &bindir);
    let mut programs = 0;
    for entry in std::fs::read_dir(&staged_bin).map_err(Error::io("read", &staged_bin))? {
        let entry = entry.map_err(Error::io("read", &staged_bin))?;
        let name = entry.file_name();
        let script = wrapper(&deps, &staged_bin.join(&name));
        let path = wrappers.join(&name);
        std::fs::write(&path, script).map_err(Error::io("write", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(Error::io("set the mode of", &path))?;
        programs += 1;
    }
    // The staged copy must run as staged.
    let staged_major = version::bindir_major(&wrappers)?;
    if staged_major != major {
        return Err(Error::Refused(format!(
            "the staged postgres reports {staged_major}, not {major}"
        )));
    }
    Ok(format!(
        "staged PostgreSQL {major} from {} into {} ({programs} programs, {} libraries beside glibc); old bindir: {}",
        bindir.display(),
        dest.display(),
        needed.len(),
        wrappers.display()
    ))
}

/// The script that runs `program` with the staged libraries.
pub fn wrapper(deps: &Path, program: &Path) -> String {
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
    format!(
        "#!/bin/sh\n# Staged by tusk upgrade stage-old: the old major's {name}, with its own libraries.\nLD_LIBRARY_PATH={deps}\nexport LD_LIBRARY_PATH\nexec {program} \"$@\"\n",
        name = program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        deps = quote(deps),
        program = quote(program),
    )
}

pub fn is_glibc(soname: &str) -> bool {
    GLIBC.iter().any(|prefix| soname.starts_with(prefix))
}

/// Parses `ldd` output into (soname, resolved path) pairs; libraries it
/// could not find are left out (and logged by the caller's check).
pub fn parse_ldd(output: &str) -> Vec<(String, PathBuf)> {
    output
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().split_once("=>")?;
            let path = rest.split_whitespace().next()?;
            path.starts_with('/')
                .then(|| (name.trim().to_owned(), PathBuf::from(path)))
        })
        .collect()
}

async fn libraries(file: &Path) -> Result<Vec<(String, PathBuf)>, Error> {
    let mut cmd = child::async_command("ldd");
    cmd.arg(file).env("LC_ALL", "C");
    let output = command::output(cmd, "ldd").await?;
    for line in output.stdout.lines().filter(|l| l.contains("not found")) {
        tracing::warn!(file = %file.display(), line = line.trim(), "a library is missing in this image");
    }
    Ok(parse_ldd(&output.stdout))
}

/// Removes what `dir` holds (it may be a mount point) or creates it.
fn empty(dir: &Path) -> Result<(), Error> {
    if !dir.exists() {
        return std::fs::create_dir_all(dir).map_err(Error::io("create", dir));
    }
    for entry in std::fs::read_dir(dir).map_err(Error::io("read", dir))? {
        let path = entry.map_err(Error::io("read", dir))?.path();
        let removed = if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(Error::io("remove", &path))?;
    }
    Ok(())
}

/// Copies `from` to `to` recursively, keeping symbolic links and modes.
fn copy_tree(from: &Path, to: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(to).map_err(Error::io("create", to))?;
    for entry in std::fs::read_dir(from).map_err(Error::io("read", from))? {
        let entry = entry.map_err(Error::io("read", from))?;
        let name = entry.file_name();
        if SKIPPED_MODULES.iter().any(|s| name == *s) {
            continue;
        }
        let source = entry.path();
        let target = to.join(&name);
        let kind = entry.file_type().map_err(Error::io("stat", &source))?;
        if kind.is_symlink() {
            let link = std::fs::read_link(&source).map_err(Error::io("read the link", &source))?;
            std::os::unix::fs::symlink(&link, &target).map_err(Error::io("link", &target))?;
        } else if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else {
            std::fs::copy(&source, &target).map_err(Error::io("copy", &source))?;
        }
    }
    Ok(())
}

/// Regular files under `dir` that are ELF objects.
fn elf_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    use std::io::Read;
    for entry in std::fs::read_dir(dir).map_err(Error::io("read", dir))? {
        let entry = entry.map_err(Error::io("read", dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(Error::io("stat", &path))?;
        if SKIPPED_MODULES.iter().any(|s| entry.file_name() == *s) || kind.is_symlink() {
            continue;
        }
        if kind.is_dir() {
            elf_files(&path, out)?;
            continue;
        }
        let mut magic = [0u8; 4];
        let is_elf = std::fs::File::open(&path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
            && magic == *b"\x7fELF";
        if is_elf {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_debian_layout_is_found_from_the_bindir() {
        assert_eq!(
            debian_layout(Path::new("/usr/lib/postgresql/15/bin")),
            Some((
                PathBuf::from("/usr/lib/postgresql/15/lib"),
                PathBuf::from("/usr/share/postgresql/15")
            ))
        );
        assert_eq!(debian_layout(Path::new("/usr/local/pgsql/bin")), None);
        assert_eq!(
            under(Path::new("/stage"), Path::new("/usr/lib/postgresql/15/bin")),
            PathBuf::from("/stage/usr/lib/postgresql/15/bin")
        );
    }

    #[test]
    fn ldd_output_gives_libraries_and_glibc_is_left_out() {
        let output = "\
\tlinux-vdso.so.1 (0x00007ffc)
\tlibpq.so.5 => /lib/x86_64-linux-gnu/libpq.so.5 (0x00007f1)
\tlibicuuc.so.72 => /lib/x86_64-linux-gnu/libicuuc.so.72 (0x00007f2)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f3)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f4)
\tlibgone.so.1 => not found
\t/lib64/ld-linux-x86-64.so.2 (0x00007f5)
";
        let parsed = parse_ldd(output);
        let names: Vec<&str> = parsed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["libpq.so.5", "libicuuc.so.72", "libm.so.6", "libc.so.6"]
        );
        let kept: Vec<&str> = names.into_iter().filter(|n| !is_glibc(n)).collect();
        assert_eq!(kept, ["libpq.so.5", "libicuuc.so.72"]);
        assert!(is_glibc("ld-linux-x86-64.so.2"));
        assert!(!is_glibc("libcrypt.so.1"));
        assert!(!is_glibc("libcom_err.so.2"));
    }

    #[test]
    fn wrappers_set_the_library_path_and_quote() {
        let script = wrapper(Path::new("/up/lib-deps"), Path::new("/up/it's/postgres"));
        assert!(script.starts_with("#!/bin/sh\n"));
        assert!(script.contains("LD_LIBRARY_PATH='/up/lib-deps'\nexport LD_LIBRARY_PATH\n"));
        assert!(
            script.contains(r#"exec '/up/it'\''s/postgres' "$@""#),
            "{script}"
        );
    }
}
