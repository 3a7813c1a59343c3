//! PostgreSQL's memory and WAL settings derived from what the instance's
//! container and volume hold (pure): `shared_buffers`,
//! `effective_cache_size`, `maintenance_work_mem` and `work_mem` from the
//! container's memory (its limit, else its request), `max_wal_size` from
//! the volume that holds `pg_wal`. A parameter the user sets in
//! `spec.postgresql.parameters` wins over the derived one ([`effective`]).
//!
//! The rules, with `usable` = memory − [`MANAGER_RESERVE_BYTES`] (the
//! instance manager shares the container):
//!
//! | setting | value |
//! |---|---|
//! | `shared_buffers` | usable / 4 |
//! | `effective_cache_size` | usable × 3 / 4 |
//! | `maintenance_work_mem` | usable / 16, within 16MB..2GB |
//! | `work_mem` | (usable − shared_buffers) / (3 × `max_connections`), within 1MB..1GB |
//! | `max_wal_size` | a quarter of the volume (half of a volume of its own), within 80MB..16GB |
//!
//! Every value is whole megabytes, so the rendered text is exact.

use std::collections::BTreeMap;

/// Memory set aside for the instance manager (and the `postgres`
/// processes' own code and stacks) before the settings share out the rest.
pub const MANAGER_RESERVE_BYTES: u64 = 64 << 20;

const MB: u64 = 1 << 20;
const GB: u64 = 1 << 30;
/// PostgreSQL's default, used when `spec.postgresql.parameters` does not
/// set `max_connections`.
const DEFAULT_MAX_CONNECTIONS: u64 = 100;

/// The settings this module derives, in the order they are documented.
pub const DERIVED: &[&str] = &[
    "shared_buffers",
    "effective_cache_size",
    "maintenance_work_mem",
    "work_mem",
    "max_wal_size",
];

/// The volume `pg_wal` lives on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalVolume {
    /// Its size in bytes: `spec.walStorage.size`, else `spec.storage.size`.
    pub bytes: u64,
    /// It holds only `pg_wal`, not the data directory too.
    pub dedicated: bool,
}

/// What the settings are derived from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inputs {
    /// The container's memory: its limit, else its request.
    pub memory_bytes: u64,
    pub wal_volume: WalVolume,
    /// `max_connections` as the user set it, else PostgreSQL's default.
    pub max_connections: u64,
}

/// The derived settings, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Derived {
    pub shared_buffers: u64,
    pub effective_cache_size: u64,
    pub maintenance_work_mem: u64,
    pub work_mem: u64,
    pub max_wal_size: u64,
}

/// The settings for `inputs` (see the module's table).
pub fn derive(inputs: &Inputs) -> Derived {
    let usable = inputs
        .memory_bytes
        .saturating_sub(MANAGER_RESERVE_BYTES)
        .max(64 * MB);
    let shared_buffers = whole_mb(usable / 4);
    let connections = inputs.max_connections.max(1);
    let share = if inputs.wal_volume.dedicated { 2 } else { 4 };
    Derived {
        shared_buffers,
        effective_cache_size: whole_mb(usable / 4 * 3),
        maintenance_work_mem: whole_mb((usable / 16).clamp(16 * MB, 2 * GB)),
        work_mem: whole_mb(((usable - shared_buffers) / (3 * connections)).clamp(MB, GB)),
        max_wal_size: whole_mb((inputs.wal_volume.bytes / share).clamp(80 * MB, 16 * GB)),
    }
}

/// `max_connections` from the user's parameters, else PostgreSQL's default.
pub fn max_connections(parameters: &BTreeMap<String, String>) -> u64 {
    parameters
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("max_connections"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_CONNECTIONS)
}

impl Derived {
    /// As PostgreSQL parameters (`256MB`, `1GB`), by name.
    pub fn parameters(&self) -> BTreeMap<String, String> {
        [
            ("shared_buffers", self.shared_buffers),
            ("effective_cache_size", self.effective_cache_size),
            ("maintenance_work_mem", self.maintenance_work_mem),
            ("work_mem", self.work_mem),
            ("max_wal_size", self.max_wal_size),
        ]
        .into_iter()
        .map(|(name, bytes)| (name.to_owned(), text(bytes)))
        .collect()
    }
}

/// The derived settings the user did not set (names compare as
/// PostgreSQL does, case-insensitively).
pub fn not_overridden(
    derived: &Derived,
    user: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    derived
        .parameters()
        .into_iter()
        .filter(|(name, _)| !user.keys().any(|k| k.eq_ignore_ascii_case(name)))
        .collect()
}

/// What PostgreSQL is given: the derived settings, overridden by the user's.
pub fn effective(derived: &Derived, user: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut all = not_overridden(derived, user);
    all.extend(user.iter().map(|(k, v)| (k.clone(), v.clone())));
    all
}

fn whole_mb(bytes: u64) -> u64 {
    (bytes / MB).max(1) * MB
}

fn text(bytes: u64) -> String {
    if bytes.is_multiple_of(GB) {
        format!("{}GB", bytes / GB)
    } else {
        format!("{}MB", bytes / MB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(memory: u64, volume: u64) -> Inputs {
        Inputs {
            memory_bytes: memory,
            wal_volume: WalVolume {
                bytes: volume,
                dedicated: false,
            },
            max_connections: 100,
        }
    }

    #[test]
    fn derived_settings_table() {
        // (memory, volume, dedicated, max_connections) ->
        // shared_buffers, effective_cache_size, maintenance_work_mem, work_mem, max_wal_size
        type Case = ((u64, u64, bool, u64), [&'static str; 5]);
        let cases: &[Case] = &[
            (
                (256 * MB, GB, false, 100),
                ["48MB", "144MB", "16MB", "1MB", "256MB"],
            ),
            (
                (GB, 10 * GB, false, 100),
                ["240MB", "720MB", "60MB", "2MB", "2560MB"],
            ),
            (
                (4 * GB, 100 * GB, false, 100),
                ["1008MB", "3024MB", "252MB", "10MB", "16GB"],
            ),
            (
                (4 * GB, 100 * GB, false, 20),
                ["1008MB", "3024MB", "252MB", "50MB", "16GB"],
            ),
            (
                (64 * GB, 2 * GB, true, 100),
                ["16368MB", "49104MB", "2GB", "163MB", "1GB"],
            ),
            // the least memory admission allows; a tiny volume keeps the floor
            (
                (128 * MB, 100 * MB, false, 100),
                ["16MB", "48MB", "16MB", "1MB", "80MB"],
            ),
        ];
        for &((memory, volume, dedicated, connections), want) in cases {
            let derived = derive(&Inputs {
                memory_bytes: memory,
                wal_volume: WalVolume {
                    bytes: volume,
                    dedicated,
                },
                max_connections: connections,
            });
            let got = derived.parameters();
            let got: Vec<&str> = [
                "shared_buffers",
                "effective_cache_size",
                "maintenance_work_mem",
                "work_mem",
                "max_wal_size",
            ]
            .iter()
            .map(|name| got[*name].as_str())
            .collect();
            assert_eq!(
                got, want,
                "memory {memory}, volume {volume}, dedicated {dedicated}"
            );
        }
    }

    #[test]
    fn max_wal_size_fits_within_the_wal_volume() {
        for volume in [GB, 3 * GB, 50 * GB, 500 * GB] {
            for dedicated in [false, true] {
                let derived = derive(&Inputs {
                    wal_volume: WalVolume {
                        bytes: volume,
                        dedicated,
                    },
                    ..shared(GB, volume)
                });
                assert!(derived.max_wal_size <= volume / 2, "{volume} {dedicated}");
            }
        }
    }

    #[test]
    fn the_user_s_parameters_win() {
        let derived = derive(&shared(GB, 10 * GB));
        let user = BTreeMap::from([
            ("Shared_Buffers".to_owned(), "128MB".to_owned()),
            ("max_connections".to_owned(), "50".to_owned()),
        ]);
        let effective = effective(&derived, &user);
        assert_eq!(
            effective.get("Shared_Buffers").map(String::as_str),
            Some("128MB")
        );
        assert!(!effective.contains_key("shared_buffers"));
        assert_eq!(effective.get("work_mem").map(String::as_str), Some("2MB"));
        assert_eq!(not_overridden(&derived, &user).len(), DERIVED.len() - 1);
        assert_eq!(max_connections(&user), 50);
        assert_eq!(max_connections(&BTreeMap::new()), 100);
    }
}
