//! Memory quantities: the value syntax of `gpuslice.io/memory` / `GPUSLICE_MEMORY` (`512Mi`, `8Gi`,
//! `1G`, plain bytes, `25%` of the device) and HAMi's `CUDA_DEVICE_MEMORY_LIMIT` (`4096m`, `4g`).
//!
//! The parser itself is `gpuslice_region::quantity` (one implementation, shared with the
//! interposer); this module adds the serde forms used by requests and configuration files.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use gpuslice_region::quantity::MemQuantity;
pub use gpuslice_region::quantity::{format_bytes, QuantityError, UNITS_HELP};

#[cfg(test)]
const MI: u64 = 1 << 20;
#[cfg(test)]
const GI: u64 = 1 << 30;
#[cfg(test)]
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

impl From<MemQuantity> for MemoryRequest {
    fn from(q: MemQuantity) -> Self {
        match q {
            MemQuantity::Bytes(b) => MemoryRequest::Bytes(b),
            MemQuantity::Percent(p) => MemoryRequest::Percent(p),
        }
    }
}

impl From<MemoryRequest> for MemQuantity {
    fn from(q: MemoryRequest) -> Self {
        match q {
            MemoryRequest::Bytes(b) => MemQuantity::Bytes(b),
            MemoryRequest::Percent(p) => MemQuantity::Percent(p),
        }
    }
}

impl MemoryRequest {
    /// Parses the gpuslice syntax: `<number>[unit]` where unit is one of Ki Mi Gi Ti (powers of
    /// 1024), K M G T (powers of 1000; `k` is accepted for K as in Kubernetes), none (bytes) or `%`.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        MemQuantity::parse(text).map(Into::into)
    }

    /// Parses HAMi's `CUDA_DEVICE_MEMORY_LIMIT` syntax: plain bytes or a number with `k`, `m`, `g`
    /// (either case), all powers of 1024 (`1g` = `1024m` = `1048576k` = `1073741824`).
    pub fn parse_hami(text: &str) -> Result<Self, QuantityError> {
        MemQuantity::parse_hami(text).map(Into::into)
    }

    /// The cap in bytes on a device with `device_total` bytes. A percentage rounds down, but never
    /// below one byte.
    pub fn resolve(self, device_total: u64) -> u64 {
        MemQuantity::from(self).resolve(device_total)
    }
}

impl FromStr for MemoryRequest {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MemoryRequest::parse(s)
    }
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
