//! The one parser of memory quantities in gpuslice (the `api` crate and the interposer both call
//! it): the value syntax of `gpuslice.io/memory` / `GPUSLICE_MEMORY` (`512Mi`, `8Gi`, `1G`, plain
//! bytes, `25%` of the device) and HAMi's `CUDA_DEVICE_MEMORY_LIMIT` (`4096m`, `4g`, plain bytes).
//!
//! Parsing is exact: fractional values (`1.5Gi`) are computed in integer arithmetic and rounded up
//! to a whole byte; zero and values that do not fit in 64 bits are errors, never clamped.
//! Dependency-free apart from `thiserror`, so the interposer can use it.

/// The units the gpuslice syntax accepts, in the order the error message lists them.
pub const UNITS_HELP: &str = "use Ki, Mi, Gi, Ti, K, M, G, T or %";

const KI: u64 = 1 << 10;
const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;
const TI: u64 = 1 << 40;

/// A memory quantity per device: a number of bytes, or a percentage of the device's total memory
/// resolved against the device it applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemQuantity {
    /// An absolute cap in bytes (never zero).
    Bytes(u64),
    /// A percentage of the device's total memory, 1–100.
    Percent(u8),
}

/// Why a quantity did not parse. The caller adds the key and the value.
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

impl MemQuantity {
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
                Ok(p) if (1..=100).contains(&p) => Ok(MemQuantity::Percent(p)),
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
        scaled(number, multiplier).map(MemQuantity::Bytes)
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
        scaled(number, multiplier).map(MemQuantity::Bytes)
    }

    /// The cap in bytes on a device with `device_total` bytes. A percentage rounds down, but never
    /// below one byte.
    pub fn resolve(self, device_total: u64) -> u64 {
        match self {
            MemQuantity::Bytes(b) => b,
            MemQuantity::Percent(p) => {
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
    let digits = u32::try_from(frac_part.len()).map_err(|_| QuantityError::NotANumber)?;
    let denom = 10u128.pow(digits);
    let mult = u128::from(multiplier);
    let whole = int_value.checked_mul(mult).ok_or(QuantityError::Overflow)?;
    let frac = (frac_value * mult).div_ceil(denom);
    let total = whole.checked_add(frac).ok_or(QuantityError::Overflow)?;
    if total == 0 {
        return Err(QuantityError::Zero);
    }
    u64::try_from(total).map_err(|_| QuantityError::Overflow)
}

/// Parses the gpuslice syntax (see [`MemQuantity::parse`]).
pub fn parse_quantity(s: &str) -> Result<MemQuantity, QuantityError> {
    MemQuantity::parse(s)
}

/// Parses HAMi's `CUDA_DEVICE_MEMORY_LIMIT` syntax (see [`MemQuantity::parse_hami`]).
pub fn parse_hami_limit(s: &str) -> Result<MemQuantity, QuantityError> {
    MemQuantity::parse_hami(s)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("512Mi"), Ok(MemQuantity::Bytes(512 << 20)));
        assert_eq!(parse_quantity("8Gi"), Ok(MemQuantity::Bytes(8 << 30)));
        assert_eq!(parse_quantity("1G"), Ok(MemQuantity::Bytes(1_000_000_000)));
        assert_eq!(parse_quantity("1.5Gi"), Ok(MemQuantity::Bytes(3 << 29)));
        assert_eq!(parse_quantity("4096"), Ok(MemQuantity::Bytes(4096)));
        assert_eq!(parse_quantity("25%"), Ok(MemQuantity::Percent(25)));
        assert_eq!(MemQuantity::Percent(25).resolve(1000), 250);
        assert_eq!(
            parse_quantity("12Q"),
            Err(QuantityError::UnknownUnit("Q".into()))
        );
        assert_eq!(parse_quantity("0%"), Err(QuantityError::BadPercent));
        assert_eq!(parse_quantity("12.5%"), Err(QuantityError::BadPercent));
        assert_eq!(parse_quantity("101%"), Err(QuantityError::BadPercent));
        assert_eq!(parse_quantity(""), Err(QuantityError::Empty));
        assert_eq!(parse_quantity("0"), Err(QuantityError::Zero));
        assert_eq!(
            parse_quantity("99999999999999999999Gi"),
            Err(QuantityError::Overflow)
        );
    }

    #[test]
    fn hami_limits() {
        assert_eq!(parse_hami_limit("1024m"), Ok(MemQuantity::Bytes(1 << 30)));
        assert_eq!(parse_hami_limit("2g"), Ok(MemQuantity::Bytes(2 << 30)));
        assert_eq!(parse_hami_limit("2G"), Ok(MemQuantity::Bytes(2 << 30)));
        assert_eq!(parse_hami_limit("64k"), Ok(MemQuantity::Bytes(64 << 10)));
        // HAMi-core reads a number without a unit as bytes.
        assert_eq!(parse_hami_limit("1048576"), Ok(MemQuantity::Bytes(1 << 20)));
        assert!(parse_hami_limit("x").is_err());
        assert!(parse_hami_limit("4Gi").is_err());
    }

    #[test]
    fn format() {
        assert_eq!(format_bytes(8 << 30), "8Gi");
        assert_eq!(format_bytes(1536 << 20), "1536Mi");
        assert_eq!(format_bytes(1000), "1000");
    }
}
