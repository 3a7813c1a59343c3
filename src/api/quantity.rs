//! Kubernetes resource quantities, as far as Tusk needs them (storage and
//! memory sizes in bytes, CPU in millicores).

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

/// Parses a CPU quantity such as `500m`, `1` or `1.5` into millicores.
/// Finer than a millicore is refused (Kubernetes would round it).
pub fn parse_millicores(value: &str) -> Result<u128, String> {
    let bad = || format!("{value:?} is not a CPU quantity such as \"500m\", \"1\" or \"1.5\"");
    if let Some(milli) = value.strip_suffix('m') {
        if milli.is_empty() || !milli.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        return milli.parse().map_err(|_| bad());
    }
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > 3 {
        return Err(bad());
    }
    if value.ends_with('.') {
        return Err(bad());
    }
    let whole: u128 = whole.parse().map_err(|_| bad())?;
    let fraction: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse::<u128>().map_err(|_| bad())? * 10u128.pow(3 - fraction.len() as u32)
    };
    whole
        .checked_mul(1000)
        .and_then(|w| w.checked_add(fraction))
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::{parse_bytes, parse_millicores};

    #[test]
    fn cpu_in_millicores() {
        assert_eq!(parse_millicores("500m"), Ok(500));
        assert_eq!(parse_millicores("1"), Ok(1000));
        assert_eq!(parse_millicores("1.5"), Ok(1500));
        assert_eq!(parse_millicores("0.25"), Ok(250));
        for bad in ["", "m", "1.2345", "1.", "-1", "1k", "1.5m", "one"] {
            assert!(parse_millicores(bad).is_err(), "{bad}");
        }
    }

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
