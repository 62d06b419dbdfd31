//! Byte quantities on workload command lines: `512Mi`, `8Gi`, `1G`, plain bytes.

use anyhow::{bail, Context, Result};

/// Parses a byte quantity with an optional binary (`Ki`, `Mi`, `Gi`, `Ti`) or decimal (`K`, `M`,
/// `G`, `T`) suffix.
pub fn parse_bytes(s: &str) -> Result<u64> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(digits);
    let n: u64 = num
        .parse()
        .with_context(|| format!("bad quantity {s:?}: no number"))?;
    let mult: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => bail!("bad quantity {s:?}: unknown unit {unit:?}"),
    };
    n.checked_mul(mult)
        .with_context(|| format!("bad quantity {s:?}: overflows 64 bits"))
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn units() {
        assert_eq!(parse_bytes("512Mi").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
    }

    #[test]
    fn errors_name_the_input() {
        let e = parse_bytes("12Q").unwrap_err().to_string();
        assert!(e.contains("12Q") && e.contains("unknown unit"), "{e}");
        assert!(parse_bytes("Gi")
            .unwrap_err()
            .to_string()
            .contains("no number"));
        assert!(parse_bytes("99999999999Ti")
            .unwrap_err()
            .to_string()
            .contains("overflows"));
    }
}
