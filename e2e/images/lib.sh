# shellcheck shell=bash
# Shared helpers for e2e/images/build-all and e2e/images/load.
#
# Everything built lives under ${TUSK_CACHE:-$HOME/.cache/tusk}/images, never in
# the repository:
#   storage-<driver>/   buildah's image store (and its run root)
#   tmp/                TMPDIR for buildah: holds RUN --mount=type=cache dirs
#   rootfs/             debootstrap minbase tarballs, one per suite
#   <image>.tar         docker-archive tarballs, loaded by e2e/images/load
#   <image>.key         the hash of the inputs the tarball was built from
#   <image>.info        what was built (reference, image id, size)

set -euo pipefail
shopt -s inherit_errexit # a failure inside $(...) is a failure

IMAGES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2034 # used by build-all
REPO_ROOT=$(cd "$IMAGES_DIR/../.." && pwd)
CACHE_DIR=${TUSK_CACHE:-$HOME/.cache/tusk}/images

log() { printf '[images] %s\n' "$*" >&2; }
die() { printf '[images] error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (buildah, debootstrap and chroot need it)"

# ---------------------------------------------------------------------------
# Host packages

_apt_updated=
ensure_pkgs() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing host packages: ${missing[*]}"
	if [ -z "$_apt_updated" ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
		_apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# ---------------------------------------------------------------------------
# The Debian mirror, read from the machine's own apt configuration at run time
# (never written into the repository).

mirror_uri() {
	if [ -n "${_MIRROR:-}" ]; then
		echo "$_MIRROR"
		return
	fi
	if [ -n "${TUSK_DEBIAN_MIRROR:-}" ]; then
		echo "$TUSK_DEBIAN_MIRROR"
		return
	fi
	local f uri
	# deb822 sources: the stanza whose Suites list a plain release (not -security).
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -e "$f" ] || continue
		uri=$(awk '
			BEGIN { RS = ""; FS = "\n" }
			{
				u = ""; s = ""; t = 0
				for (i = 1; i <= NF; i++) {
					if ($i ~ /^URIs:/)   { u = $i; sub(/^URIs:[ \t]*/, "", u); sub(/[ \t].*/, "", u) }
					if ($i ~ /^Suites:/) { s = $i }
					if ($i ~ /^Types:/ && $i ~ /[ \t]deb([ \t]|$)/) { t = 1 }
				}
				if (t && u != "" && s !~ /-security/) { print u; exit }
			}' "$f")
		if [ -n "$uri" ]; then echo "${uri%/}"; return; fi
	done
	# one-line sources
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -e "$f" ] || continue
		uri=$(awk '$1 == "deb" && $0 !~ /-security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' "$f")
		if [ -n "$uri" ]; then echo "${uri%/}"; return; fi
	done
	die "no Debian mirror found in /etc/apt/sources.list{,.d/*}; set TUSK_DEBIAN_MIRROR"
}

# ---------------------------------------------------------------------------
# Hashing the inputs of an image

# hash_inputs LABEL... -- PATH...: a sha256 over the given labels and over the
# names and contents of every file under the given paths. Names are taken
# relative to each path's parent, so every clone of the repository, wherever it
# lives, finds the images an earlier one built.
hash_inputs() {
	local labels=() paths=() p
	while [ $# -gt 0 ] && [ "$1" != -- ]; do labels+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	paths=("$@")
	{
		printf '%s\n' "${labels[@]}"
		for p in "${paths[@]}"; do
			(cd "$(dirname "$p")" && find "$(basename "$p")" -type f -print0 |
				LC_ALL=C sort -z | xargs -0r sha256sum)
		done
	} | sha256sum | cut -c1-64
}

# ---------------------------------------------------------------------------
# buildah, with its store under the cache dir

mkdir -p "$CACHE_DIR/tmp" "$CACHE_DIR/rootfs"
# buildah keeps RUN --mount=type=cache directories under $TMPDIR/buildah-cache-<uid>;
# pointing TMPDIR into the cache makes them persist with the rest.
export TMPDIR="$CACHE_DIR/tmp"

BUILDAH_DRIVER=${TUSK_BUILDAH_DRIVER:-}
pick_driver() {
	[ -n "$BUILDAH_DRIVER" ] && return
	if [ -e "$CACHE_DIR/driver" ]; then
		BUILDAH_DRIVER=$(cat "$CACHE_DIR/driver")
		return
	fi
	# overlay needs kernel overlayfs on a file system that can carry an upper dir;
	# probe it with a throw-away mount, else fall back to vfs (full copies, slower).
	local d="$CACHE_DIR/tmp/overlay-probe.$$"
	mkdir -p "$d"/{lower,upper,work,merged}
	if mount -t overlay overlay -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged" 2>/dev/null; then
		umount "$d/merged"
		BUILDAH_DRIVER=overlay
	else
		BUILDAH_DRIVER=vfs
	fi
	rm -rf "$d"
	echo "$BUILDAH_DRIVER" >"$CACHE_DIR/driver"
}

bh() {
	buildah --root "$CACHE_DIR/storage-$BUILDAH_DRIVER" \
		--runroot "$CACHE_DIR/storage-$BUILDAH_DRIVER/run" \
		--storage-driver "$BUILDAH_DRIVER" "$@"
}

image_exists() { bh inspect --type image --format "{{.FromImageID}}" "$1" >/dev/null 2>&1; }

ensure_buildah() {
	ensure_pkgs buildah skopeo
	pick_driver
}

# ---------------------------------------------------------------------------
# Debian base images: debootstrap --variant=minbase, cached as a tarball, then
# imported into buildah as localhost/tusk-debian:<suite>.

ROOTFS_VERSION=2 # bump to rebuild every cached rootfs

_MIRROR=
rootfs_key() { # suite
	[ -n "$_MIRROR" ] || _MIRROR=$(mirror_uri) || exit 1
	hash_inputs "rootfs v$ROOTFS_VERSION" "suite $1" "$(mirror_uri)" --
}

rootfs_path() { # suite
	local key
	key=$(rootfs_key "$1")
	echo "$CACHE_DIR/rootfs/$1-${key:0:16}.tar"
}

# prefetch_rootfs SUITE...: debootstrap missing suites in the background (they
# are mostly network-bound); rootfs_tar waits for them.
declare -A _PREFETCH=()
prefetch_rootfs() {
	local s
	ensure_pkgs debootstrap debian-archive-keyring
	for s; do
		[ -s "$(rootfs_path "$s")" ] && continue
		[ -n "${_PREFETCH[$s]:-}" ] && continue
		rootfs_tar "$s" >/dev/null &
		_PREFETCH[$s]=$!
	done
}

# rootfs_tar SUITE: prints the path of a cached minbase rootfs tarball, making it
# first when needed.
rootfs_tar() {
	local suite=$1 tar
	tar=$(rootfs_path "$suite")
	if [ -n "${_PREFETCH[$suite]:-}" ]; then
		# (callers run in command substitutions, so poll rather than wait)
		while kill -0 "${_PREFETCH[$suite]}" 2>/dev/null; do sleep 2; done
		[ -s "$tar" ] || die "debootstrap $suite failed (log: $CACHE_DIR/tmp/debootstrap-$suite.log)"
	fi
	if [ ! -s "$tar" ]; then
		ensure_pkgs debootstrap debian-archive-keyring
		local mirror dir
		mirror=$(mirror_uri)
		dir="$CACHE_DIR/tmp/rootfs-$suite.$$"
		rm -rf "$dir"
		log "debootstrap --variant=minbase $suite (from the machine's apt mirror)"
		local t0=$SECONDS
		if ! debootstrap --variant=minbase --components=main \
			--keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
			"$suite" "$dir" "$mirror" >"$CACHE_DIR/tmp/debootstrap-$suite.log" 2>&1; then
			tail -20 "$CACHE_DIR/tmp/debootstrap-$suite.log" >&2
			rm -rf "$dir"
			die "debootstrap $suite failed (log: $CACHE_DIR/tmp/debootstrap-$suite.log)"
		fi
		# slim it: downloaded .debs, apt lists and caches, docs, message
		# translations (locale.alias stays); keep the dpkg database.
		rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/cache/apt/*.bin "$dir"/var/lib/apt/lists/* \
			"$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* \
			"$dir"/var/log/* "$dir"/tmp/* "$dir"/var/tmp/*
		find "$dir/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
		# images never need the host's name or resolver baked in.
		: >"$dir/etc/hostname"
		: >"$dir/etc/resolv.conf"
		tar --numeric-owner --xattrs -C "$dir" -cf "$tar.part" .
		mv "$tar.part" "$tar"
		rm -rf "$dir"
		# drop tarballs of this suite made from older inputs
		find "$CACHE_DIR/rootfs" -name "$suite-*.tar" ! -name "$(basename "$tar")" -delete
		log "rootfs $suite: $(du -h "$tar" | cut -f1) in $((SECONDS - t0))s"
	fi
	echo "$tar"
}

# base_image SUITE: makes sure localhost/tusk-debian:<suite> is in buildah's
# store (built from the cached rootfs) and prints its name.
base_image() {
	local suite=$1 tar key ref ctr
	tar=$(rootfs_tar "$suite")
	key=$(basename "$tar" .tar)
	key=${key#"$suite"-}
	ref="localhost/tusk-debian:$suite"
	if ! image_exists "$ref-$key"; then
		log "importing rootfs $suite into buildah"
		ctr=$(bh from --quiet scratch)
		bh add --quiet "$ctr" "$tar" / >/dev/null
		bh config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			--env LANG=C.UTF-8 --cmd /bin/bash "$ctr"
		bh commit --quiet --rm "$ctr" "$ref-$key" >/dev/null
		bh tag "$ref-$key" "$ref"
		# forget bases of this suite made from older inputs
		local old
		for old in $(bh images --format '{{.Name}}:{{.Tag}}' | grep -F "$ref-" | grep -vF "$ref-$key"); do
			bh rmi "$old" >/dev/null 2>&1 || true
		done
	fi
	echo "$ref-$key"
}

# ---------------------------------------------------------------------------
# Results

# export_archive IMAGE NAME: writes $CACHE_DIR/NAME.tar as a docker-archive
# whose only tag is IMAGE.
export_archive() {
	local ref=$1 out="$CACHE_DIR/$2.tar"
	rm -f "$out" "$out.part"
	bh push --quiet "$ref" "docker-archive:$out.part:$ref" >/dev/null
	mv "$out.part" "$out"
}

human_size() { numfmt --to=iec --suffix=B "$1"; }
