//! `only=scale`: 256 slices × 4 processes, the arbiter's CPU and hand-off latency.

use super::harness::*;
use crate::bench::loadavg;
use anyhow::{Context, Result};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};
/// Eight simulated H100s: the node of the scale run (a 1024-process node does not fit on two
/// 80 GiB devices once every process holds a 300 MiB context, as on the real driver).
pub(super) const SCALE_DEVICES: &str = "name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0";

/// Per device: (max hand-off p99 ns, total hand-offs) from the status file.
pub(super) fn handoff_stats(arb: &Arbiter) -> (u64, u64, usize) {
    let devs = arb
        .sched_status()
        .and_then(|v| v["devices"].as_array().cloned())
        .unwrap_or_default();
    let p99 = devs
        .iter()
        .filter_map(|d| d["handoff_p99_ns"].as_u64())
        .max()
        .unwrap_or(0);
    let n = devs.iter().filter_map(|d| d["handoffs"].as_u64()).sum();
    (p99, n, devs.len())
}

/// Arbiter CPU over `secs`, fraction of one core.
pub(super) fn arbiter_cpu(pid: u32, secs: u64) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let t0 = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(secs));
    (cpu_ticks(pid) - t0) as f64 / hz / secs as f64
}

/// 256 slices × 4 processes (`procs` in all) on an 8-device node: every process keeps a context
/// and is mostly idle (one 200 µs request every 50 s) except one per slice, which is light (one
/// request a second). Reports arbiter CPU idle (slices, no processes), with every process
/// attached, hand-off p99 over that run, and then with eight saturating tenants beside them.
pub(super) fn scale(dist: &Path, procs: usize, rt: u32, engine: &'static str) -> Result<()> {
    println!("\n== scale, {engine} engine");
    let devices = [SCALE_DEVICES; 8].join(";");
    let node = node(dist, &format!("scale-{engine}"), &devices, engine);
    let sim = node.open_sim()?;
    // Admission reserves the contexts the processes really hold (300 MiB each, 4 per slice).
    let arb = start_arbiter(
        &node,
        "5ms",
        "context_reserve = \"300Mi\"\nmodule_allowance = \"0\"\nprocesses_per_slice = 4",
        rt,
        "",
    )?;
    let slices = procs.div_ceil(4);
    for i in 0..slices {
        arb.admit(&format!("s{i}"), "\"memory\":\"256Mi\"")?;
    }
    let pid = arb.pid().context("the arbiter is not running")?;
    std::thread::sleep(Duration::from_secs(1));
    let idle = arbiter_cpu(pid, 10);
    let t_start = Instant::now();
    let mut kids = Vec::new();
    for k in 0..procs {
        let light = k % 4 == 0;
        let rate = if light { "1" } else { "0.02" };
        let args: Vec<String> = [
            "bursty",
            "--kernel-us",
            "200",
            "--rate",
            rate,
            "--seconds",
            "150",
        ]
        .map(String::from)
        .to_vec();
        kids.push((
            light,
            tenant(&node, &arb.state_dir.join(format!("s{}", k / 4)), &args)?,
        ));
    }
    // Attached = the gate thread exists (it starts at the first gated launch).
    let attached = |p: u32| {
        std::fs::read_dir(format!("/proc/{p}/task"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
                    .any(|c| c.starts_with("gpuslice-gate"))
            })
            .unwrap_or(false)
    };
    while kids.iter().any(|(_, k)| !attached(k.id())) {
        if t_start.elapsed() > Duration::from_secs(120) {
            let n = kids.iter().filter(|(_, k)| attached(k.id())).count();
            println!("   only {n} of {procs} processes attached after 120 s");
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let startup = t_start.elapsed().as_secs_f64();
    let (_, h0, _) = handoff_stats(&arb);
    let attached_cpu = arbiter_cpu(pid, 10);
    std::thread::sleep(Duration::from_millis(1100));
    let (p99_light, h1, ndev) = handoff_stats(&arb);
    // Eight saturating tenants in slices of device 0 beside the rest.
    let mut on0 = Vec::new();
    for i in 0..slices {
        let rec = std::fs::read_to_string(arb.state_dir.join(format!("s{i}/slice.json")))
            .unwrap_or_default();
        if rec.contains("\"index\": 0") {
            on0.push(i);
        }
        if on0.len() == 8 {
            break;
        }
    }
    let busy_kids: Vec<Child> = on0
        .iter()
        .map(|i| {
            tenant(
                &node,
                &arb.state_dir.join(format!("s{i}")),
                &saturate(1000, 5.0, 2),
            )
        })
        .collect::<Result<_>>()?;
    let busy_cpu = arbiter_cpu(pid, 5);
    wait_all(busy_kids);
    std::thread::sleep(Duration::from_millis(1200));
    let (p99_busy, h2, _) = handoff_stats(&arb);
    // The light processes' request latencies (p99 each), then stop everyone.
    for (_, k) in &kids {
        // SAFETY: plain signal to a child this function started and has not reaped yet.
        unsafe { libc::kill(k.id() as libc::pid_t, libc::SIGTERM) };
    }
    for (_, k) in kids {
        let _ = k.wait_with_output();
    }
    // The SCHED_FIFO priority the device threads really got (0: off or refused).
    let rt_in_effect: Vec<u64> = arb
        .sched_status()
        .and_then(|v| v["devices"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|d| d["realtime_priority"].as_u64().unwrap_or(0))
        .collect();
    for i in 0..slices {
        arb.release(&format!("s{i}"));
    }
    drop(sim);
    println!(
        "\n== {slices} slices, {procs} tenant processes on 8 devices ({ndev} in use; 3 of 4 processes per \
         slice mostly idle, 1 at one 200 µs request/s); measured from {startup:.0} s after the start (load {})",
        loadavg()
    );
    println!(
        "   scheduler.realtime_priority = {rt}; in effect per device thread: {rt_in_effect:?}"
    );
    println!(
        "   arbiter CPU: idle (slices, no processes) {:.3} % of a core ({}); {procs} processes attached {:.2} %; \
         + 8 saturating tenants {:.1} %",
        idle * 100.0,
        if idle <= 0.01 { "ok" } else { "MISS" },
        attached_cpu * 100.0,
        busy_cpu * 100.0
    );
    println!(
        "   lease hand-off p99 (device free → next holder woken, arbiter side, worst device): \
         {:.1} µs over {} hand-offs with the {procs} processes ({}); {:.1} µs over {} more with 8 saturating tenants ({})",
        p99_light as f64 / 1e3,
        h1.saturating_sub(h0),
        if p99_light <= 100_000 { "ok" } else { "MISS" },
        p99_busy as f64 / 1e3,
        h2.saturating_sub(h1),
        if p99_busy <= 100_000 { "ok" } else { "MISS" },
    );
    Ok(())
}
