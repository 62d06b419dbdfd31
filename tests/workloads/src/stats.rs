//! Latency percentiles of the workloads' reports.

/// The `p` quantile of `sorted` (ascending): the element at the rounded fractional index, as
/// the workloads have always reported it; NaN when there is none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let Some(last) = sorted.len().checked_sub(1) else {
        return f64::NAN;
    };
    // Rounded index of a fraction of a list far shorter than 2^52: within range by construction.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = (last as f64 * p.clamp(0.0, 1.0)).round() as usize;
    sorted[i.min(last)]
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_of_nothing_are_nan_and_of_one_are_it() {
        assert!(percentile(&[], 0.99).is_nan());
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert_eq!(percentile(&[1.0, 3.0, 5.0], 0.5), 3.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 1.0), 4.0);
    }
}
