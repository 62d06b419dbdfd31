//! Number conversions the cast lints (`lib.rs`) would flag, each with the reason it is sound,
//! so the modules never write a bare narrowing `as`.

/// `x` as a whole `u64`: NaN and negatives → 0, beyond → `u64::MAX`. Rust's float-to-integer
/// `as` saturates exactly so (since 1.45); std has no checked float-to-integer conversion.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn f64_to_u64(x: f64) -> u64 {
    x as u64
}

/// `x` as a whole `i64`, saturating as [`f64_to_u64`] (NaN → 0).
#[allow(clippy::cast_possible_truncation)]
pub fn f64_to_i64(x: f64) -> i64 {
    x as i64
}

/// `x` as a whole `u32`, saturating as [`f64_to_u64`].
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn f64_to_u32(x: f64) -> u32 {
    x as u32
}

/// `x` as a whole `usize`, saturating as [`f64_to_u64`].
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn f64_to_usize(x: f64) -> usize {
    x as usize
}

/// A `Duration`'s count (`as_nanos`, `as_micros`…), saturating at `u64::MAX` (585 years of ns).
pub fn u128_to_u64(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// A count, saturating at `u32::MAX`.
pub fn usize_to_u32(x: usize) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// The low 32 bits of `x`, on purpose (a seed or sequence start, not a quantity).
#[allow(clippy::cast_possible_truncation)]
pub fn low_u32(x: u64) -> u32 {
    x as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_saturate_and_nan_is_zero() {
        assert_eq!(f64_to_u64(f64::NAN), 0);
        assert_eq!(f64_to_u64(-3.0), 0);
        assert_eq!(f64_to_u64(1e30), u64::MAX);
        assert_eq!(f64_to_i64(-1e30), i64::MIN);
        assert_eq!(f64_to_u32(4.9), 4);
        assert_eq!(f64_to_usize(7.0), 7);
    }

    #[test]
    fn integers_saturate_or_keep_the_low_bits() {
        assert_eq!(u128_to_u64(u128::MAX), u64::MAX);
        assert_eq!(u128_to_u64(5), 5);
        assert_eq!(usize_to_u32(usize::MAX), u32::MAX);
        assert_eq!(low_u32(0x1_0000_0002), 2);
    }
}
