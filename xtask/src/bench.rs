//! `cargo xtask bench NAME`: benchmarks that print ratios measured side by side in one run.
//! Results are recorded, with the command, in docs/benchmarks.md.

use crate::demo::DEMO_DEVICES;
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
        "simulated engine, timeslice and kernel models: two-process shares, 50 µs to 50 ms kernels",
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
        "interposer" => bench_interposer::run(args),
        "container-start" => bench_container_start::run(args),
        _ => sim(),
    }
}

/// The simulator's engine models, side by side in every engine benchmark.
pub(crate) const ENGINES: [&str; 2] = ["timeslice", "kernel"];

/// Two processes saturating device 0 with kernels of several sizes, under each engine model:
/// each one's share and the sum, the models in adjacent columns.
fn sim() -> Result<()> {
    let dist = crate::bench_share::build_tree()?;
    let nodes = ENGINES
        .iter()
        .map(|e| SimNode::with_engine(&dist, DEMO_DEVICES, e))
        .collect::<std::io::Result<Vec<_>>>()?;
    println!("command: cargo xtask bench sim  (two processes, back-to-back kernels, 3 s each)");
    let mut head = format!("{:>10}", "kernel");
    for e in ENGINES {
        head += &format!("  | {e:<9} {:>7} {:>7} {:>7}", "proc 0", "proc 1", "sum");
    }
    println!("{head}");
    for us in [50u64, 1000, 5000, 50_000] {
        let mut row = format!("{:>8}µs", us);
        for node in &nodes {
            let (p0, p1, sum) = contend(node, us)?;
            row += &format!("  | {:<9} {p0:>7.3} {p1:>7.3} {sum:>7.3}", "");
        }
        println!("{row}");
    }
    println!("load average: {}", uptime());
    Ok(())
}

/// `gpuslice-workload contend` with two processes and `us` kernels: (share 0, share 1, sum).
fn contend(node: &SimNode, us: u64) -> Result<(f64, f64, f64)> {
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
    let proc_share = |p: &str| {
        text.lines()
            .find(|l| l.starts_with(p))
            .and_then(|l| gpuslice_field(l, "share"))
            .unwrap_or(f64::NAN)
    };
    Ok((
        proc_share("proc=0"),
        proc_share("proc=1"),
        gpuslice_field(&text, "total_share").unwrap_or(f64::NAN),
    ))
}

/// `/proc/loadavg`'s three load averages.
pub(crate) fn uptime() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn gpuslice_field(text: &str, key: &str) -> Option<f64> {
    let prefix = format!("{key}=");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))?
        .parse()
        .ok()
}
