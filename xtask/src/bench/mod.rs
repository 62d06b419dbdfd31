//! `cargo xtask bench NAME`: benchmarks that print ratios measured side by side in one run.
//! Results are recorded, with the command, in docs/benchmarks.md.

use anyhow::{bail, Context, Result};

mod container_start;
mod host;
mod interposer;
mod share;
mod sim;

pub(crate) use host::{loadavg, HostCpu};

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
        "achieved compute shares under guarantees, limits and priority; an LLM server's shape",
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
        "share" => share::run(args),
        "interposer" => interposer::run(args),
        "container-start" => container_start::run(args),
        _ => sim::run(),
    }
}

/// The simulator's engine models, side by side in every engine benchmark (the suites' list).
pub(crate) use gpuslice_test_support::sim_tenants::ENGINES;

pub(crate) use host::uptime;

/// `key=value` of a `gpuslice-workload` output line, as a number.
pub(crate) fn gpuslice_field(text: &str, key: &str) -> Option<f64> {
    let prefix = format!("{key}=");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))?
        .parse()
        .ok()
}
