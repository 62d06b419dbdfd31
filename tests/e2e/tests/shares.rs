//! Compute guarantees through a real engine: two containers on the one simulated GPU, run by
//! containerd 1.6 (`ctr run`, runc v2 shim, `gpuslice-runtime` as runc binary) with
//! `gpuslice.io/compute` 30 and 70 (and `gpuslice.io/memory: 1Gi`), both running
//! `gpuslice-workload saturate --kernel-us 1000 --seconds 5 --depth 8`. The arbiter's
//! time-slicing must split the device 30/70 ± 3 points, measured as each container's share of the
//! kernels both completed (every kernel lasts 1 ms of device time).
//!
//! Both containers first wait on a start file in the simulator's shared directory, which the test
//! creates once both are up, so the two five-second runs overlap (container start latency would
//! otherwise give the first one a stretch of the device alone).

use anyhow::{ensure, Context, Result};
use gpuslice_e2e::containerd::CtrRun;
use gpuslice_e2e::image::WORKLOAD;
use gpuslice_e2e::sim::CONTAINER_STATE_DIR;
use gpuslice_e2e::suite::{stdout_ok, Node, RuntimeNode};
use gpuslice_e2e::workload;
use std::time::Duration;

const TOLERANCE: f64 = 0.03;

fn spec(node: &Node, name: &str, compute: &str) -> CtrRun {
    let d = CONTAINER_STATE_DIR;
    let script = format!(
        "touch {d}/ready-{name}; \
         while [ ! -e {d}/go ]; do sleep 0.02; done; \
         exec {WORKLOAD} saturate --kernel-us 1000 --seconds 5 --depth 8"
    );
    CtrRun {
        args: vec!["/bin/sh".into(), "-c".into(), script],
        env: node.sim.container_env(),
        annotations: vec![
            ("gpuslice.io/compute".into(), compute.into()),
            ("gpuslice.io/memory".into(), "1Gi".into()),
        ],
        binds: node.sim.container_binds(),
        timeout: Duration::from_secs(120),
    }
}

#[test]
fn containerd_guarantees_30_70() -> Result<()> {
    let Some(RuntimeNode {
        ctd,
        arbiter,
        node,
        rt,
    }) = RuntimeNode::start("1.6", "shares/containerd-1.6", "shares")?
    else {
        return Ok(());
    };
    let (a, b) = std::thread::scope(|s| -> Result<_> {
        let ha = s.spawn(|| ctd.run("share-30", &rt, &spec(&node, "a", "30")));
        let hb = s.spawn(|| ctd.run("share-70", &rt, &spec(&node, "b", "70")));
        // Release both at once when both are up (or after 60 s: then the runs fail below).
        node.sim
            .release_together(&["a", "b"], Duration::from_secs(60))?;
        let a = ha.join().map_err(|_| anyhow::anyhow!("thread a"))??;
        let b = hb.join().map_err(|_| anyhow::anyhow!("thread b"))??;
        Ok((a, b))
    })?;
    let a = stdout_ok("ctr run (compute 30)", &a)?;
    let b = stdout_ok("ctr run (compute 70)", &b)?;
    let ka = workload::get_u64(&a, "kernels").context("no kernels= from A")?;
    let kb = workload::get_u64(&b, "kernels").context("no kernels= from B")?;
    let share_a = ka as f64 / (ka + kb) as f64;
    println!(
        "A (compute 30): {}B (compute 70): {}kernels A={ka} B={kb}: A's share of the device {:.1}%, B's {:.1}% (want 30/70 ± {:.0})",
        a,
        b,
        share_a * 100.0,
        (1.0 - share_a) * 100.0,
        TOLERANCE * 100.0
    );
    // The device was kept busy: at least 80 % of 5 s of 1 ms kernels between the two.
    ensure!(
        ka + kb >= 4000,
        "only {} kernels of 1 ms completed in 5 s",
        ka + kb
    );
    ensure!(
        (share_a - 0.30).abs() <= TOLERANCE,
        "A ran {ka} kernels, B {kb}: shares {:.1}/{:.1}, wanted 30/70 ± {:.0} points\narbiter log:\n{}",
        share_a * 100.0,
        (1.0 - share_a) * 100.0,
        TOLERANCE * 100.0,
        arbiter.log()
    );
    Ok(())
}
