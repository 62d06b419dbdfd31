//! `cargo xtask bench sim`: the simulated engine alone (no arbiter), both engine models.

use super::ENGINES;
use crate::demo::DEMO_DEVICES;
use anyhow::{bail, Context, Result};
use gpuslice_test_support::{NodeConfig, SimNode};

/// Two processes saturating device 0 with kernels of several sizes, under each engine model:
/// each one's share and the sum, the models in adjacent columns.
pub(super) fn run() -> Result<()> {
    let dist = super::share::build_tree()?;
    let nodes = ENGINES
        .iter()
        .map(|e| {
            let cfg = NodeConfig {
                engine: Some(*e),
                ..NodeConfig::dist(&dist, DEMO_DEVICES)
            };
            SimNode::new(&format!("bench-sim-{e}"), &cfg)
        })
        .collect::<Vec<_>>();
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
    println!("load average: {}", super::uptime());
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
            .and_then(|l| super::gpuslice_field(l, "share"))
            .unwrap_or(f64::NAN)
    };
    Ok((
        proc_share("proc=0"),
        proc_share("proc=1"),
        super::gpuslice_field(&text, "total_share").unwrap_or(f64::NAN),
    ))
}
