//! A parsed `spec.version`: the supported majors, and the minor when one is
//! pinned. Validation refuses what does not parse; the model and the
//! builders use what does.

use std::str::FromStr;

/// A parsed `spec.version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PgVersion {
    pub major: u32,
    pub minor: Option<u32>,
}

impl FromStr for PgVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?} is not a PostgreSQL version such as \"17\" or \"17.2\"");
        let (major, minor) = match s.split_once('.') {
            Some((major, minor)) => (major, Some(minor.parse().map_err(|_| bad())?)),
            None => (s, None),
        };
        let major: u32 = major.parse().map_err(|_| bad())?;
        if !(13..=19).contains(&major) {
            return Err(format!(
                "PostgreSQL {major} is not supported: use a major version from 13 to 19"
            ));
        }
        Ok(Self { major, minor })
    }
}
