//! `cargo xtask bench NAME`: benchmarks that print ratios measured side by side in one run.
//! Results are recorded, with the command, in docs/benchmarks.md.

use crate::demo::DEMO_DEVICES;
use crate::dist;
use crate::simenv::SimNode;
use anyhow::{bail, Context, Result};

#[path = "bench_container_start.rs"]
mod bench_container_start;
#[path = "bench_interposer.rs"]
mod bench_interposer;

/// (name, what it measures, issue that builds it when not yet available)
const BENCHES: &[(&str, &str, Option<u32>)] = &[
    (
        "sim",
        "simulated engine: two-process shares for 50 µs, 1 ms and 5 ms kernels",
        None,
    ),
    (
        "interposer",
        "added ns per launch / alloc-free / cuMemGetInfo with vs without libgpuslice.so",
        None,
    ),
    (
        "share",
        "achieved compute shares under guarantees, limits and priority",
        None,
    ),
    (
        "container-start",
        "added container start latency versus plain runc",
        None,
    ),
];

pub fn run(list: bool, name: Option<&str>, args: &[String]) -> Result<()> {
    if list || name.is_none() {
        for (n, about, issue) in BENCHES {
            let state = issue.map_or(String::new(), |i| format!(" (not built yet: issue #{i})"));
            println!("{n:<16} {about}{state}");
        }
        return Ok(());
    }
    let name = name.unwrap_or_default();
    let (_, _, issue) = BENCHES
        .iter()
        .find(|(n, _, _)| *n == name)
        .with_context(|| {
            format!("unknown benchmark {name:?}; `cargo xtask bench --list` names them")
        })?;
    if let Some(i) = issue {
        bail!("benchmark {name:?} is not built yet (issue #{i})");
    }
    match name {
        "share" => crate::bench_share::run(args),
        "interposer" => bench_interposer::run(),
        "container-start" => bench_container_start::run(args),
        _ => sim(),
    }
}

/// Two processes saturating device 0 with kernels of several sizes: each one's share and the sum.
fn sim() -> Result<()> {
    let dist = dist::run()?;
    let node = SimNode::new(&dist, DEMO_DEVICES)?;
    println!("command: cargo xtask bench sim");
    println!(
        "{:>10}  {:>8}  {:>8}  {:>8}",
        "kernel", "proc 0", "proc 1", "sum"
    );
    for us in [50u64, 1000, 5000] {
        let out = node
            .workload()
            .args([
                "contend",
                "--procs",
                "2",
                "--kernel-us",
                &us.to_string(),
                "--seconds",
                "3",
            ])
            .output()
            .context("running contend")?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "contend failed: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let get = |k: &str| gpuslice_field(&text, k);
        let p0 = text
            .lines()
            .find(|l| l.starts_with("proc=0"))
            .map(|l| gpuslice_field(l, "share"));
        let p1 = text
            .lines()
            .find(|l| l.starts_with("proc=1"))
            .map(|l| gpuslice_field(l, "share"));
        println!(
            "{:>8}µs  {:>8.3}  {:>8.3}  {:>8.3}",
            us,
            p0.flatten().unwrap_or(f64::NAN),
            p1.flatten().unwrap_or(f64::NAN),
            get("total_share").unwrap_or(f64::NAN)
        );
    }
    Ok(())
}

fn gpuslice_field(text: &str, key: &str) -> Option<f64> {
    let prefix = format!("{key}=");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))?
        .parse()
        .ok()
}
