//! `only=sweep`: the scheduler's quantum.

use super::harness::*;
use crate::bench::loadavg;
use anyhow::Result;
use gpuslice_sim_core::Node;
use std::time::Duration;
/// The quantum: 30/70 with 1 ms kernels under 2, 5 and 10 ms.
pub(super) fn sweep(node: &SimNode, sim: &Node, engine: &str) -> Result<()> {
    println!(
        "\n== quantum sweep ({engine} engine): 30/70, 1 ms kernels, depth 4, 6 s (shares over the last 5 s)"
    );
    println!(
        "{:>8} {:>7} {:>7} {:>9} {:>5}",
        "quantum", "A", "B", "device", "load"
    );
    for q in ["2ms", "5ms", "10ms"] {
        let arb = start_arbiter(node, q, ADMISSION, 0, "")?;
        let da = arb.admit("a", "\"compute\":30,\"memory\":\"1Gi\"")?;
        let db = arb.admit("b", "\"compute\":70,\"memory\":\"1Gi\"")?;
        let kids = vec![
            tenant(node, &da, &saturate(1000, 6.2, 4))?,
            tenant(node, &db, &saturate(1000, 6.2, 4))?,
        ];
        let pids: Vec<u32> = kids.iter().map(|k| k.id()).collect();
        let samples = sample(
            sim,
            &pids,
            Duration::from_millis(6000),
            Duration::from_millis(10),
        );
        wait_all(kids);
        let w = windows(&samples, 0.9, 5.0)
            .into_iter()
            .next()
            .unwrap_or_default();
        if w.len() == 2 {
            println!(
                "{q:>8} {:>7} {:>7} {:>9} {:>5}",
                pct(w[0]),
                pct(w[1]),
                pct(w[0] + w[1]),
                loadavg()
            );
        }
    }
    Ok(())
}
