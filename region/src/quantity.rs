//! Parsing of memory quantities as users write them: `512Mi`, `8Gi`, `1G`, `1073741824`, `25%`
//! (`gpuslice.io/memory`, `GPUSLICE_MEMORY`) and HAMi's `CUDA_DEVICE_MEMORY_LIMIT` (`1024m`, `4g`).

/// A parsed memory request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemQuantity {
    /// An absolute number of bytes.
    Bytes(u64),
    /// A share of the device's memory, in basis points (2500 = 25 %).
    Percent(u32),
}

impl MemQuantity {
    /// Bytes for a device of `device_total` bytes.
    pub fn resolve(self, device_total: u64) -> u64 {
        match self {
            MemQuantity::Bytes(b) => b,
            MemQuantity::Percent(bp) => {
                ((device_total as u128 * u128::from(bp)) / 10_000).min(u128::from(u64::MAX)) as u64
            }
        }
    }
}

/// Parses a Kubernetes-style quantity: binary (`Ki`, `Mi`, `Gi`, `Ti`), decimal (`k`, `K`, `M`,
/// `G`, `T`), plain bytes, or a percentage `1%`–`100%` (decimals allowed, e.g. `12.5%`).
pub fn parse_quantity(s: &str) -> Result<MemQuantity, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty quantity".into());
    }
    if let Some(p) = t.strip_suffix('%') {
        let v: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not a percentage"))?;
        if !(v > 0.0 && v <= 100.0) {
            return Err(format!("`{s}`: a percentage must be in (0, 100]"));
        }
        return Ok(MemQuantity::Percent((v * 100.0).round() as u32));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (use Ki, Mi, Gi, Ti, k, M, G, T or %)"
            ))
        }
    };
    scale(num, mult).ok_or_else(|| format!("`{s}` is not a valid quantity"))
}

/// Parses HAMi's `CUDA_DEVICE_MEMORY_LIMIT` syntax: a number with an optional binary unit
/// `k`/`m`/`g`/`t` (either case; `m` means MiB here); plain numbers are MiB as in HAMi.
pub fn parse_hami_limit(s: &str) -> Result<MemQuantity, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "k" | "ki" | "kb" => 1 << 10,
        "" | "m" | "mi" | "mb" => 1 << 20,
        "g" | "gi" | "gb" => 1 << 30,
        "t" | "ti" | "tb" => 1 << 40,
        other => return Err(format!("`{s}`: unknown unit `{other}` (use k, m, g or t)")),
    };
    scale(num, mult).ok_or_else(|| format!("`{s}` is not a valid memory limit"))
}

fn scale(num: &str, mult: u64) -> Option<MemQuantity> {
    if num.is_empty() {
        return None;
    }
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).map(MemQuantity::Bytes);
    }
    let f: f64 = num.parse().ok()?;
    let b = f * mult as f64;
    (b.is_finite() && b >= 0.0 && b < u64::MAX as f64).then_some(MemQuantity::Bytes(b as u64))
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
        assert_eq!(parse_quantity("25%"), Ok(MemQuantity::Percent(2500)));
        assert_eq!(MemQuantity::Percent(2500).resolve(1000), 250);
        assert!(parse_quantity("12Q").is_err());
        assert!(parse_quantity("0%").is_err());
        assert!(parse_quantity("101%").is_err());
        assert!(parse_quantity("").is_err());
        assert!(parse_quantity("99999999999999999999Gi").is_err());
    }

    #[test]
    fn hami_limits() {
        assert_eq!(parse_hami_limit("1024m"), Ok(MemQuantity::Bytes(1 << 30)));
        assert_eq!(parse_hami_limit("2g"), Ok(MemQuantity::Bytes(2 << 30)));
        assert_eq!(parse_hami_limit("2G"), Ok(MemQuantity::Bytes(2 << 30)));
        assert_eq!(parse_hami_limit("100"), Ok(MemQuantity::Bytes(100 << 20)));
        assert!(parse_hami_limit("x").is_err());
    }
}
