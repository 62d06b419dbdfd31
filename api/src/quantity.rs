//! Memory quantities: the value syntax of `gpuslice.io/memory` / `GPUSLICE_MEMORY` (`512Mi`, `8Gi`,
//! `1G`, plain bytes, `25%` of the device) and HAMi's `CUDA_DEVICE_MEMORY_LIMIT` (`4096m`, `4g`).
//!
//! Parsing is exact: fractional values (`1.5Gi`) are computed in integer arithmetic and rounded up
//! to a whole byte; zero and values that do not fit in 64 bits are errors, never clamped.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The units the gpuslice syntax accepts, in the order the error message lists them.
pub const UNITS_HELP: &str = "use Ki, Mi, Gi, Ti, K, M, G, T or %";

const KI: u64 = 1 << 10;
const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;
const TI: u64 = 1 << 40;

/// A memory request per device: a number of bytes, or a percentage of the device's total memory
/// that is resolved against the device the slice is placed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryRequest {
    /// An absolute cap in bytes (never zero).
    Bytes(u64),
    /// A percentage of the device's total memory, 1–100.
    Percent(u8),
}

/// Why a quantity did not parse. The caller adds the key and the value (see `RequestError`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Nothing (or only blanks) was given.
    #[error("empty value")]
    Empty,
    /// The number part is missing or is not a decimal number.
    #[error("not a number (expected e.g. 512Mi, 8Gi, 1G, 1073741824 or 25%)")]
    NotANumber,
    /// A suffix that is not a known unit.
    #[error("unknown unit \"{0}\" ({UNITS_HELP})")]
    UnknownUnit(String),
    /// HAMi syntax: a suffix other than k, m, g.
    #[error("unknown unit \"{0}\" (CUDA_DEVICE_MEMORY_LIMIT takes k, m or g, or plain bytes)")]
    UnknownHamiUnit(String),
    /// The quantity is zero.
    #[error("must be greater than zero")]
    Zero,
    /// The quantity does not fit in 64 bits of bytes.
    #[error("too large (more than 2^64-1 bytes)")]
    Overflow,
    /// A percentage outside 1–100 or with a fraction.
    #[error("percentage must be a whole number from 1 to 100")]
    BadPercent,
}

impl MemoryRequest {
    /// Parses the gpuslice syntax: `<number>[unit]` where unit is one of Ki Mi Gi Ti (powers of
    /// 1024), K M G T (powers of 1000; `k` is accepted for K as in Kubernetes), none (bytes) or `%`.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(QuantityError::Empty);
        }
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        if number.is_empty() {
            return Err(QuantityError::NotANumber);
        }
        let unit = unit.trim_start();
        if unit == "%" {
            let pct: u32 = if number.contains('.') {
                return Err(QuantityError::BadPercent);
            } else {
                number.parse().map_err(|_| QuantityError::NotANumber)?
            };
            return match u8::try_from(pct) {
                Ok(p) if (1..=100).contains(&p) => Ok(MemoryRequest::Percent(p)),
                _ => Err(QuantityError::BadPercent),
            };
        }
        let multiplier = match unit {
            "" => 1,
            "Ki" => KI,
            "Mi" => MI,
            "Gi" => GI,
            "Ti" => TI,
            "K" | "k" => 1_000,
            "M" => 1_000_000,
            "G" => 1_000_000_000,
            "T" => 1_000_000_000_000,
            other => return Err(QuantityError::UnknownUnit(other.to_string())),
        };
        scaled(number, multiplier).map(MemoryRequest::Bytes)
    }

    /// Parses HAMi's `CUDA_DEVICE_MEMORY_LIMIT` syntax: plain bytes or a number with `k`, `m`, `g`
    /// (either case), all powers of 1024 (`1g` = `1024m` = `1048576k` = `1073741824`).
    pub fn parse_hami(text: &str) -> Result<Self, QuantityError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(QuantityError::Empty);
        }
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        if number.is_empty() {
            return Err(QuantityError::NotANumber);
        }
        let multiplier = match unit {
            "" => 1,
            "k" | "K" => KI,
            "m" | "M" => MI,
            "g" | "G" => GI,
            other => return Err(QuantityError::UnknownHamiUnit(other.to_string())),
        };
        scaled(number, multiplier).map(MemoryRequest::Bytes)
    }

    /// The cap in bytes on a device with `device_total` bytes. A percentage rounds down, but never
    /// below one byte.
    pub fn resolve(self, device_total: u64) -> u64 {
        match self {
            MemoryRequest::Bytes(b) => b,
            MemoryRequest::Percent(p) => {
                let v = u128::from(device_total) * u128::from(p) / 100;
                u64::try_from(v).unwrap_or(u64::MAX).max(1)
            }
        }
    }
}

/// `number` (digits with at most one `.`) times `multiplier`, rounded up to a whole byte.
fn scaled(number: &str, multiplier: u64) -> Result<u64, QuantityError> {
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() && frac_part.is_empty()
        || !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
        || (number.contains('.') && frac_part.is_empty())
    {
        return Err(QuantityError::NotANumber);
    }
    // Too many fractional digits would overflow the denominator; 18 is far beyond any use.
    if frac_part.len() > 18 {
        return Err(QuantityError::NotANumber);
    }
    let int_value: u128 = if int_part.is_empty() {
        0
    } else {
        // Leading zeros are fine; the length bound prevents u128 overflow.
        let trimmed = int_part.trim_start_matches('0');
        if trimmed.len() > 30 {
            return Err(QuantityError::Overflow);
        }
        if trimmed.is_empty() {
            0
        } else {
            trimmed.parse().map_err(|_| QuantityError::NotANumber)?
        }
    };
    let frac_value: u128 = if frac_part.is_empty() {
        0
    } else {
        frac_part.parse().map_err(|_| QuantityError::NotANumber)?
    };
    let denom = 10u128.pow(frac_part.len() as u32);
    let mult = u128::from(multiplier);
    let whole = int_value.checked_mul(mult).ok_or(QuantityError::Overflow)?;
    let frac = (frac_value * mult).div_ceil(denom);
    let total = whole.checked_add(frac).ok_or(QuantityError::Overflow)?;
    if total == 0 {
        return Err(QuantityError::Zero);
    }
    u64::try_from(total).map_err(|_| QuantityError::Overflow)
}

impl FromStr for MemoryRequest {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MemoryRequest::parse(s)
    }
}

/// Formats bytes with the largest binary unit that divides them exactly (`8Gi`, `1536Mi`, `1000`).
pub fn format_bytes(bytes: u64) -> String {
    for (unit, size) in [("Ti", TI), ("Gi", GI), ("Mi", MI), ("Ki", KI)] {
        if bytes != 0 && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

impl fmt::Display for MemoryRequest {
    /// Writes a form that parses back to the same value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryRequest::Bytes(b) => f.write_str(&format_bytes(*b)),
            MemoryRequest::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Serialize for MemoryRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MemoryRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MemoryRequest;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a memory quantity such as \"8Gi\", \"25%\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MemoryRequest, E> {
                MemoryRequest::parse(v).map_err(|e| E::custom(format!("\"{v}\": {e}")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MemoryRequest, E> {
                if v == 0 {
                    return Err(E::custom(QuantityError::Zero));
                }
                Ok(MemoryRequest::Bytes(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MemoryRequest, E> {
                match u64::try_from(v) {
                    Ok(u) => self.visit_u64(u),
                    Err(_) => Err(E::custom("must be greater than zero")),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A byte size in configuration files: the same syntax as [`MemoryRequest`] without `%`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_bytes(self.0))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte size such as \"512Mi\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                if v.trim() == "0" {
                    return Ok(ByteSize(0));
                }
                match MemoryRequest::parse(v) {
                    Ok(MemoryRequest::Bytes(b)) => Ok(ByteSize(b)),
                    Ok(MemoryRequest::Percent(_)) => Err(E::custom(format!(
                        "\"{v}\": a percentage is not allowed here"
                    ))),
                    Err(e) => Err(E::custom(format!("\"{v}\": {e}"))),
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom("must not be negative"))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(
            MemoryRequest::parse("512Mi"),
            Ok(MemoryRequest::Bytes(512 * MI))
        );
        assert_eq!(
            MemoryRequest::parse("8Gi"),
            Ok(MemoryRequest::Bytes(8 * GI))
        );
        assert_eq!(
            MemoryRequest::parse("1G"),
            Ok(MemoryRequest::Bytes(1_000_000_000))
        );
        assert_eq!(MemoryRequest::parse("2k"), Ok(MemoryRequest::Bytes(2000)));
        assert_eq!(MemoryRequest::parse("1Ti"), Ok(MemoryRequest::Bytes(TI)));
        assert_eq!(
            MemoryRequest::parse("1048576"),
            Ok(MemoryRequest::Bytes(MI))
        );
        assert_eq!(
            MemoryRequest::parse(" 1.5Gi "),
            Ok(MemoryRequest::Bytes(GI + GI / 2))
        );
        assert_eq!(MemoryRequest::parse("0.5Ki"), Ok(MemoryRequest::Bytes(512)));
        assert_eq!(MemoryRequest::parse("25%"), Ok(MemoryRequest::Percent(25)));
        assert_eq!(
            MemoryRequest::parse("100%"),
            Ok(MemoryRequest::Percent(100))
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            MemoryRequest::parse("12Q"),
            Err(QuantityError::UnknownUnit("Q".into()))
        );
        assert_eq!(
            MemoryRequest::parse("12Q").unwrap_err().to_string(),
            "unknown unit \"Q\" (use Ki, Mi, Gi, Ti, K, M, G, T or %)"
        );
        assert_eq!(MemoryRequest::parse(""), Err(QuantityError::Empty));
        assert_eq!(MemoryRequest::parse("Gi"), Err(QuantityError::NotANumber));
        assert_eq!(
            MemoryRequest::parse("1..2Gi"),
            Err(QuantityError::NotANumber)
        );
        assert_eq!(MemoryRequest::parse("1.Gi"), Err(QuantityError::NotANumber));
        assert_eq!(MemoryRequest::parse("-1Gi"), Err(QuantityError::NotANumber));
        assert_eq!(MemoryRequest::parse("0"), Err(QuantityError::Zero));
        assert_eq!(MemoryRequest::parse("0Gi"), Err(QuantityError::Zero));
        assert_eq!(MemoryRequest::parse("0%"), Err(QuantityError::BadPercent));
        assert_eq!(MemoryRequest::parse("101%"), Err(QuantityError::BadPercent));
        assert_eq!(MemoryRequest::parse("2.5%"), Err(QuantityError::BadPercent));
        assert_eq!(
            MemoryRequest::parse("99999999999999999999"),
            Err(QuantityError::Overflow)
        );
        assert_eq!(
            MemoryRequest::parse("16777216Ti"),
            Err(QuantityError::Overflow)
        );
        assert_eq!(
            MemoryRequest::parse("18446744073709551615"),
            Ok(MemoryRequest::Bytes(u64::MAX))
        );
        assert_eq!(
            MemoryRequest::parse("1000000000000000000000000000000000000000000"),
            Err(QuantityError::Overflow)
        );
    }

    #[test]
    fn hami() {
        for s in ["1g", "1G", "1024m", "1048576k", "1073741824"] {
            assert_eq!(
                MemoryRequest::parse_hami(s),
                Ok(MemoryRequest::Bytes(GI)),
                "{s}"
            );
        }
        assert_eq!(
            MemoryRequest::parse_hami("4096m"),
            Ok(MemoryRequest::Bytes(4 * GI))
        );
        assert_eq!(
            MemoryRequest::parse_hami("4Gi"),
            Err(QuantityError::UnknownHamiUnit("Gi".into()))
        );
        assert_eq!(MemoryRequest::parse_hami("0m"), Err(QuantityError::Zero));
        assert_eq!(
            MemoryRequest::parse_hami("1.5g"),
            Err(QuantityError::UnknownHamiUnit(".5g".into()))
        );
    }

    #[test]
    fn resolve_and_display_round_trip() {
        assert_eq!(MemoryRequest::Percent(25).resolve(80 * GI), 20 * GI);
        assert_eq!(MemoryRequest::Percent(1).resolve(10), 1);
        assert_eq!(MemoryRequest::Bytes(5).resolve(80 * GI), 5);
        for s in ["8Gi", "1536Mi", "1000", "25%", "3Ki"] {
            let q = MemoryRequest::parse(s).unwrap();
            assert_eq!(q.to_string(), s);
            assert_eq!(MemoryRequest::parse(&q.to_string()), Ok(q));
        }
        let json = serde_json::to_string(&MemoryRequest::Bytes(8 * GI)).unwrap();
        assert_eq!(json, "\"8Gi\"");
        let back: MemoryRequest = serde_json::from_str(&json).unwrap();
        assert_eq!(back, MemoryRequest::Bytes(8 * GI));
        let n: MemoryRequest = serde_json::from_str("4096").unwrap();
        assert_eq!(n, MemoryRequest::Bytes(4096));
        assert!(serde_json::from_str::<MemoryRequest>("0").is_err());
        assert!(serde_json::from_str::<MemoryRequest>("\"7X\"").is_err());
    }
}
