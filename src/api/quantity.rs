//! Kubernetes resource quantities, as far as Tusk needs them (storage sizes).

/// Parses a quantity such as `10Gi`, `500M` or `1.5Ti` into bytes.
pub fn parse_bytes(value: &str) -> Result<u128, String> {
    let bad = || format!("{value:?} is not a quantity such as \"10Gi\" or \"500M\"");
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (number, suffix) = value.split_at(split);
    let multiplier: u128 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        _ => return Err(bad()),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.contains('.') || fraction.len() > 9 {
        return Err(bad());
    }
    let whole: u128 = whole.parse().map_err(|_| bad())?;
    let fraction_value: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().map_err(|_| bad())?
    };
    let scale = 10u128.pow(fraction.len() as u32);
    whole
        .checked_mul(multiplier)
        .and_then(|w| w.checked_add(fraction_value * multiplier / scale))
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn binary_and_decimal_suffixes() {
        assert_eq!(parse_bytes("1Gi"), Ok(1 << 30));
        assert_eq!(parse_bytes("500M"), Ok(500_000_000));
        assert_eq!(parse_bytes("1.5Ki"), Ok(1536));
        assert_eq!(parse_bytes("42"), Ok(42));
        assert!(parse_bytes("2Gi") > parse_bytes("2000M"));
    }

    #[test]
    fn garbage_is_refused() {
        for bad in ["", "Gi", "1.2.3Gi", "10GB", "-1Gi", "1e3"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
