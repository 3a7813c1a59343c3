//! How full the instance's volumes are, from `statvfs(2)` on `PGDATA` (the
//! data volume) and on `PGDATA/pg_wal` when it lives on another filesystem
//! (a separate WAL volume). No PostgreSQL involved: a full disk stops
//! PostgreSQL (a PANIC on the first WAL write that fails, then crash
//! recovery that cannot finish), and this is what still tells the operator
//! why.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::sys::statvfs::statvfs;

use crate::contract::{VolumeKind, VolumeUsage, Volumes};

/// Every volume of the instance whose data directory is `pgdata`. A data
/// directory not created yet is measured at its parent, on the same volume.
pub fn usage(pgdata: &Path) -> Result<Volumes, String> {
    let data_path = if pgdata.exists() {
        pgdata
    } else {
        pgdata.parent().unwrap_or(pgdata)
    };
    let mut volumes = vec![measure(VolumeKind::Data, data_path)?];
    let wal = pgdata.join("pg_wal");
    if let (Ok(data_meta), Ok(wal_meta)) = (std::fs::metadata(data_path), std::fs::metadata(&wal))
        && data_meta.dev() != wal_meta.dev()
    {
        volumes.push(measure(VolumeKind::Wal, &wal)?);
    }
    Ok(Volumes { volumes })
}

// `fsblkcnt_t` and `c_ulong` are u64 on x86_64 Linux but not everywhere.
#[allow(clippy::useless_conversion)]
fn measure(volume: VolumeKind, path: &Path) -> Result<VolumeUsage, String> {
    let stats = statvfs(path).map_err(|e| format!("statvfs {}: {e}", path.display()))?;
    let fragment = u64::from(stats.fragment_size());
    Ok(VolumeUsage {
        volume,
        total_bytes: u64::from(stats.blocks()).saturating_mul(fragment),
        available_bytes: u64::from(stats.blocks_available()).saturating_mul(fragment),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_volume_is_measured_even_before_initdb() {
        let dir = std::env::temp_dir().join(format!("tusk-volumes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("pgdata");
        let volumes = usage(&missing).unwrap().volumes;
        assert_eq!(volumes.len(), 1, "{volumes:?}");
        assert_eq!(volumes[0].volume, VolumeKind::Data);
        assert!(volumes[0].total_bytes > 0);
        assert!(volumes[0].available_bytes <= volumes[0].total_bytes);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
