//! A stable hash for change detection.
//!
//! std's `DefaultHasher` is randomly seeded per process and its algorithm may
//! change between Rust releases; the spec hash is stored in annotations and
//! compared across operator restarts and upgrades, so it needs a fixed function.
//! FNV-1a is tiny, fast enough for a few kilobytes, and specified, which is all
//! change detection needs (this is not a defence against tampering).

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1a of `bytes`.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// [`fnv1a64`] as 16 lowercase hex digits, fit for a label or annotation value.
pub(crate) fn fnv1a64_hex(bytes: &[u8]) -> String {
    format!("{:016x}", fnv1a64(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // From the FNV reference test suite.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a64_hex(b"a"), "af63dc4c8601ec8c");
    }
}
