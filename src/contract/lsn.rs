//! A WAL position. PostgreSQL prints it as two hex halves (`16/B374D848`); on
//! the wire and in status it keeps that form, in code it is a number so that
//! comparisons and differences are arithmetic, not string games.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A byte position in the WAL stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// Bytes from `earlier` to `self`; zero when `earlier` is ahead.
    pub fn bytes_after(self, earlier: Lsn) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// Why a text is not an LSN.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a WAL position such as 0/3000148")]
pub struct ParseLsnError(String);

impl FromStr for Lsn {
    type Err = ParseLsnError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseLsnError(s.to_owned());
        let (high, low) = s.split_once('/').ok_or_else(bad)?;
        let half = |part: &str| {
            if part.is_empty() || part.len() > 8 {
                return Err(bad());
            }
            u64::from_str_radix(part, 16).map_err(|_| bad())
        };
        Ok(Lsn((half(high)? << 32) | half(low)?))
    }
}

impl Serialize for Lsn {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Lsn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn postgres_spellings_parse_and_print_back() {
        let lsn: Lsn = "16/B374D848".parse().expect("parses");
        assert_eq!(lsn, Lsn((0x16 << 32) | 0xB374_D848));
        assert_eq!(lsn.to_string(), "16/B374D848");
        assert_eq!("0/0".parse::<Lsn>(), Ok(Lsn(0)));
        // PostgreSQL accepts lower case on input; the output is upper case.
        assert_eq!(
            "0/3000148".parse::<Lsn>().map(|l| l.to_string()).as_deref(),
            Ok("0/3000148")
        );
        for bad in ["", "0", "/1", "1/", "x/1", "123456789/0", "0/1/2"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn differences_never_go_negative() {
        assert_eq!(Lsn(10).bytes_after(Lsn(4)), 6);
        assert_eq!(Lsn(4).bytes_after(Lsn(10)), 0);
    }

    proptest! {
        #[test]
        fn every_position_round_trips_through_text_and_json(n in any::<u64>()) {
            let lsn = Lsn(n);
            prop_assert_eq!(lsn.to_string().parse::<Lsn>(), Ok(lsn));
            let json = serde_json::to_string(&lsn).expect("serializes");
            prop_assert_eq!(serde_json::from_str::<Lsn>(&json).expect("deserializes"), lsn);
        }
    }
}
