//! The arbiter's metrics endpoint as a Prometheus scrape sees it: `GET /metrics` over plain HTTP,
//! and the labels of one slice's series, for the check that a Pod's slice is labelled with the
//! Pod's namespace, name and container (`docs/metrics.md`).

use anyhow::{ensure, Context, Result};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The page at `http://{addr}/metrics` (body only).
pub fn scrape(addr: &str) -> Result<String> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("metrics endpoint {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, body) = out
        .split_once("\r\n\r\n")
        .with_context(|| format!("not an HTTP reply: {out}"))?;
    ensure!(head.starts_with("HTTP/1.1 200"), "scrape answered {head}");
    Ok(body.to_string())
}

/// The labels of each series of `metric` in `page`, in page order.
pub fn series(page: &str, metric: &str) -> Vec<BTreeMap<String, String>> {
    let prefix = format!("{metric}{{");
    page.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|l| l.split_once("} "))
        .map(|(labels, _)| parse_labels(labels))
        .collect()
}

/// `a="x",b="y"` (values without escapes, as gpuslice's label values are names and ids).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    text.split("\",")
        .filter_map(|kv| kv.split_once("=\""))
        .map(|(k, v)| (k.to_string(), v.trim_end_matches('"').to_string()))
        .collect()
}

/// Checks that the `gpuslice_slice_memory_cap_bytes` series of each slice in `want` (slice id,
/// namespace, Pod, container) carries exactly those `namespace`, `pod` and `container` labels.
pub fn check_pod_labels(addr: &str, want: &[(&str, &str, &str, &str)]) -> Result<()> {
    let page = scrape(addr)?;
    let caps = series(&page, "gpuslice_slice_memory_cap_bytes");
    for (slice, ns, pod, container) in want {
        let l = caps
            .iter()
            .find(|l| l.get("slice").map(String::as_str) == Some(*slice))
            .with_context(|| {
                format!("no gpuslice_slice_memory_cap_bytes for slice {slice}:\n{page}")
            })?;
        let got = |k: &str| l.get(k).map(String::as_str).unwrap_or("<none>");
        ensure!(
            (got("namespace"), got("pod"), got("container")) == (*ns, *pod, *container),
            "slice {slice}: labels namespace={} pod={} container={}, the Pod's are {ns}/{pod}/{container}",
            got("namespace"),
            got("pod"),
            got("container")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_read_per_series() {
        let page = "# HELP x\n\
                    gpuslice_slice_memory_cap_bytes{slice=\"abc\",device=\"0\",namespace=\"default\",pod=\"p\",container=\"c\"} 1073741824\n\
                    gpuslice_slice_memory_cap_bytes{slice=\"d\",device=\"0\",namespace=\"\",pod=\"\",container=\"\"} 1\n";
        let s = series(page, "gpuslice_slice_memory_cap_bytes");
        assert_eq!(s.len(), 2);
        assert_eq!(s[0]["pod"], "p");
        assert_eq!(s[0]["container"], "c");
        assert_eq!(s[1]["namespace"], "");
        assert!(series(page, "gpuslice_slice_memory").is_empty());
    }
}
