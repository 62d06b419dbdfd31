//! Kubernetes resource quantities (`16Gi`, `40`, `1.5G`, `2e3`, `500m`) as exact whole numbers.
//! The capacities this driver publishes and reads back (`memory` in bytes, `compute` in percent,
//! `slices`) are whole numbers; a quantity that is negative, fractional or out of range is an
//! error, never rounded.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Why a quantity is not a whole number we can use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("quantity \"{text}\": {reason}")]
pub struct QuantityError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses a quantity that must denote a whole number from 0 to `u64::MAX`.
pub fn parse(text: &str) -> Result<u64, QuantityError> {
    let err = |reason| QuantityError {
        text: text.to_string(),
        reason,
    };
    let t = text.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    if t.starts_with('-') {
        return Err(err("negative"));
    }
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(err("no number"));
    }
    if frac.contains('.') {
        return Err(err("two decimal points"));
    }
    // (power of two, power of ten)
    let (bin, dec): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        s if s.starts_with(['e', 'E']) => {
            let e: i32 = s[1..].parse().map_err(|_| err("unknown suffix"))?;
            (0, e)
        }
        _ => return Err(err("unknown suffix")),
    };
    let digits: String = [int, frac].concat();
    if digits.len() > 30 {
        return Err(err("too many digits"));
    }
    let mut value: u128 = digits.parse().map_err(|_| err("not a number"))?;
    value = value.checked_shl(bin).ok_or_else(|| err("out of range"))?;
    let exp10 = dec - i32::try_from(frac.len()).map_err(|_| err("too many digits"))?;
    if exp10 >= 0 {
        for _ in 0..exp10 {
            value = value.checked_mul(10).ok_or_else(|| err("out of range"))?;
        }
    } else {
        for _ in 0..exp10.unsigned_abs() {
            if !value.is_multiple_of(10) {
                return Err(err("not a whole number"));
            }
            value /= 10;
        }
    }
    u64::try_from(value).map_err(|_| err("out of range"))
}

/// Parses a [`Quantity`].
pub fn of(q: &Quantity) -> Result<u64, QuantityError> {
    parse(&q.0)
}

/// A whole number as a quantity (plain digits: valid, and canonical for the API server).
pub fn quantity(value: u64) -> Quantity {
    Quantity(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_in_every_notation() {
        assert_eq!(parse("16Gi"), Ok(16 << 30));
        assert_eq!(parse("40"), Ok(40));
        assert_eq!(parse("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse("2e3"), Ok(2000));
        assert_eq!(parse("1k"), Ok(1000));
        assert_eq!(parse("1M"), Ok(1_000_000));
        assert_eq!(parse("40000m"), Ok(40));
        assert_eq!(parse("+7"), Ok(7));
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn refuses_what_is_not_a_whole_number() {
        for bad in [
            "-1", "0.5", "500m", "1Zi", "", "Gi", "1.2.3", "16EiB", "16Ei", "1e400",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
