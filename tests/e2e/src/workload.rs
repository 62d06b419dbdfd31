//! Reading `gpuslice-workload` output: lines of `key=value` tokens, values optionally quoted.

use std::collections::BTreeMap;

/// Every `key=value` token of every line, in order (a key may repeat across lines).
pub fn tokens(out: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for line in out.lines() {
        let mut rest = line.trim();
        while !rest.is_empty() {
            let Some(eq) = rest.find('=') else { break };
            let key = rest[..eq].trim().to_string();
            let after = &rest[eq + 1..];
            let (val, next) = if let Some(q) = after.strip_prefix('"') {
                match q.find('"') {
                    Some(end) => (q[..end].to_string(), &q[end + 1..]),
                    None => (q.to_string(), ""),
                }
            } else {
                match after.find(' ') {
                    Some(sp) => (after[..sp].to_string(), &after[sp..]),
                    None => (after.to_string(), ""),
                }
            };
            if key.contains(' ') {
                // Not a token line (e.g. an error message): skip the rest of it.
                break;
            }
            v.push((key, val));
            rest = next.trim_start();
        }
    }
    v
}

/// The first value of `key`.
pub fn get(out: &str, key: &str) -> Option<String> {
    tokens(out)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// The first value of `key` as an integer.
pub fn get_u64(out: &str, key: &str) -> Option<u64> {
    get(out, key).and_then(|v| v.parse().ok())
}

/// All tokens of the first line that has `key`.
pub fn line_with(out: &str, key: &str) -> BTreeMap<String, String> {
    out.lines()
        .map(tokens)
        .find(|t| t.iter().any(|(k, _)| k == key))
        .map(|t| t.into_iter().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quoted_values() {
        let out = "device=0 name=\"NVIDIA H100 80GB HBM3\" total_mem=1073741824 meminfo_free=5 meminfo_total=1073741824\n\
                   nvml_device=0 name=\"x y\" uuid=GPU-1 total=1073741824 used=0 free=1 util=0 processes=[]\n";
        assert_eq!(get(out, "name").as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(get_u64(out, "total_mem"), Some(1 << 30));
        assert_eq!(get_u64(out, "meminfo_total"), Some(1 << 30));
        assert_eq!(
            line_with(out, "nvml_device")
                .get("total")
                .map(String::as_str),
            Some("1073741824")
        );
        assert_eq!(get(out, "missing"), None);
    }
}
