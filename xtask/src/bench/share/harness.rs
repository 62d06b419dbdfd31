//! The share benchmark's harness: the arbiter of a run, tenants in slices, the simulator's
//! ground-truth samples and the shares computed from them.

use crate::shell::{cargo, exec, target_dir};
use anyhow::{Context, Result};
use gpuslice_sim_core::Node;
pub(crate) use gpuslice_test_support::{Arbiter, NodeConfig, SimNode};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
pub(super) const DEVICES: &str = "name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0;\
name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0";

/// The admission of the share scenarios: 16 MiB a context, one process a slice.
pub(super) const ADMISSION: &str =
    "context_reserve = \"16Mi\"\nmodule_allowance = \"0\"\nprocesses_per_slice = 1";

/// A node of the benchmark's tree (`tag` names its directory).
pub(super) fn node(dist: &Path, tag: &str, devices: &str, engine: &'static str) -> SimNode {
    SimNode::new(
        tag,
        &NodeConfig {
            engine: Some(engine),
            ..NodeConfig::dist(dist, devices)
        },
    )
}

/// The arbiter of one scenario on `node` (in `<node>/arbiter-<quantum>`): the scheduler's
/// `quantum` and `realtime_priority = rt` (and `scheduler`, more lines of that section),
/// `admission` as the body of `[admission]`, no metrics, and the scheduler's status file
/// written ([`Arbiter::sched_status`]). Early hand-offs as `GPUSLICE_SCHED_EARLY_HANDOFF` says
/// (on by default); logging as the caller's `RUST_LOG` says (default `warn`).
pub(super) fn start_arbiter(
    node: &SimNode,
    quantum: &str,
    admission: &str,
    rt: u32,
    scheduler: &str,
) -> Result<Arbiter> {
    let config = format!(
        "[admission]\n{admission}\n[metrics]\nenabled = false\n[scheduler]\n\
         quantum = \"{quantum}\"\nrealtime_priority = {rt}\n{scheduler}"
    );
    let early = std::env::var("GPUSLICE_SCHED_EARLY_HANDOFF").unwrap_or_else(|_| "1".into());
    let mut arb = node.new_arbiter(&format!("arbiter-{quantum}"), &config)?;
    arb.write_sched_status()
        .env("GPUSLICE_SCHED_EARLY_HANDOFF", early)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        );
    arb.start()?;
    Ok(arb)
}

/// (seconds since start, cumulative busy ns per tenant).
pub(super) type Samples = Vec<(f64, Vec<u64>)>;

/// A tenant process in a slice, of the node's tree.
pub(crate) fn tenant(node: &SimNode, slice: &Path, args: &[String]) -> Result<Child> {
    node.tenant(slice, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting a tenant")
}

pub(crate) fn saturate(us: u64, secs: f64, depth: usize) -> Vec<String> {
    [
        "saturate",
        "--kernel-us",
        &us.to_string(),
        "--seconds",
        &secs.to_string(),
        "--depth",
        &depth.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// Cumulative busy ns of each pid on device 0, sampled every `every` for `span`.
pub(super) fn sample(
    sim: &Node,
    pids: &[u32],
    span: Duration,
    every: Duration,
) -> Vec<(f64, Vec<u64>)> {
    let t0 = Instant::now();
    let mut out = Vec::new();
    while t0.elapsed() < span {
        let t = t0.elapsed().as_secs_f64();
        out.push((t, pids.iter().map(|&p| sim.process_busy_ns(0, p)).collect()));
        std::thread::sleep(every);
    }
    out
}

/// Shares per window of `win` seconds: (start, shares).
pub(super) fn windows(samples: &[(f64, Vec<u64>)], from: f64, win: f64) -> Vec<Vec<f64>> {
    let mut out = Vec::new();
    let mut start = from;
    loop {
        let a = samples.iter().find(|(t, _)| *t >= start);
        let b = samples.iter().find(|(t, _)| *t >= start + win);
        let (Some((ta, va)), Some((tb, vb))) = (a, b) else {
            break;
        };
        out.push(
            va.iter()
                .zip(vb)
                .map(|(x, y)| y.saturating_sub(*x) as f64 / 1e9 / (tb - ta))
                .collect(),
        );
        start += win;
    }
    out
}

pub(crate) fn wait_all(children: Vec<Child>) -> Vec<String> {
    children
        .into_iter()
        .map(|c| {
            c.wait_with_output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        })
        .collect()
}

pub(super) fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    s * s / (x.len() as f64 * q)
}

pub(crate) struct Ctx<'a> {
    pub(crate) node: &'a SimNode,
    pub(crate) arb: &'a Arbiter,
    pub(crate) sim: &'a Node,
    /// The simulator's engine model this context's node runs (`timeslice` / `kernel`).
    pub(crate) engine: &'static str,
}

/// The tenants' engine time, sampled every 10 ms for 10.6 s.
pub(super) fn sample_run(c: &Ctx, children: &[Child]) -> Samples {
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    sample(
        c.sim,
        &pids,
        Duration::from_millis(10_600),
        Duration::from_millis(10),
    )
}

/// Saturating tenants with the given requests and workloads for 10.5 s; returns the 1 s windows
/// and the 10 s share of each, and the raw samples.
pub(super) fn shares_run(
    c: &Ctx,
    tenants: &[(&str, &str, Vec<String>)],
) -> Result<(Vec<Vec<f64>>, Vec<f64>, Samples)> {
    // Every slice is admitted before any tenant starts: the device is shared (queue bounds
    // set) from the first launch, so no tenant queues work alone that would then drain, and
    // be charged, in its neighbours' first second (a depth-1000 tenant started before its
    // neighbour was admitted showed 49 % in the first 1 s window).
    let mut dirs = Vec::new();
    for (id, req, _) in tenants {
        dirs.push(c.arb.admit(id, req)?);
    }
    let mut children = Vec::new();
    for ((_, _, args), dir) in tenants.iter().zip(&dirs) {
        let ch = tenant(c.node, dir, args)?;
        children.push(ch);
    }
    let samples = sample_run(c, &children);
    // The arbiter's view before the slices go: each tenant's drain p99 (revoke → its queued
    // work reported complete), µs.
    let st = c.arb.sched_status();
    let drains: Vec<f64> = tenants
        .iter()
        .map(|(id, _, _)| {
            st.as_ref()
                .and_then(|v| v["devices"].as_array().cloned())
                .into_iter()
                .flatten()
                .flat_map(|d| d["slices"].as_array().cloned().unwrap_or_default())
                .find(|s| s["slice_id"] == *id)
                .and_then(|s| s["drain_p99_ns"].as_u64())
                .map_or(f64::NAN, |ns| ns as f64 / 1e3)
        })
        .collect();
    DRAINS.with(|d| *d.borrow_mut() = drains);
    wait_all(children);
    for (id, _, _) in tenants {
        c.arb.release(id);
    }
    let w1 = windows(&samples, 0.5, 1.0);
    let w10 = windows(&samples, 0.5, 10.0)
        .into_iter()
        .next()
        .unwrap_or_default();
    Ok((w1, w10, samples))
}

thread_local! {
    /// Drain p99 (µs) of each tenant of the last [`shares_run`].
    pub(super) static DRAINS: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub(super) fn pct(x: f64) -> String {
    format!("{:5.1}", x * 100.0)
}

/// Builds (release) only what this benchmark runs and lays it out like the dist tree under
/// `target/bench-share/` (so a half-edited unrelated crate cannot stop it).
pub(crate) fn build_tree() -> Result<PathBuf> {
    let mut cmd = cargo();
    cmd.args(["build", "--release"]);
    for p in [
        "gpuslice-arbiter",
        "gpuslice-interposer",
        "gpuslice-sim-cuda",
        "gpuslice-sim-nvml",
        "gpuslice-workloads",
    ] {
        cmd.args(["-p", p]);
    }
    exec(&mut cmd)?;
    let rel = target_dir().join("release");
    let tree = target_dir().join("bench-share");
    for (from, to) in [
        ("gpuslice-arbiter", "usr/bin/gpuslice-arbiter"),
        ("libgpuslice.so", "usr/lib/gpuslice/libgpuslice.so"),
        ("libcuda.so", "sim/libcuda.so.1"),
        ("libnvidia_ml.so", "sim/libnvidia-ml.so.1"),
        ("gpuslice-workload", "sim/bin/gpuslice-workload"),
    ] {
        let dst = tree.join(to);
        if let Some(d) = dst.parent() {
            std::fs::create_dir_all(d)?;
        }
        let _ = std::fs::remove_file(&dst);
        std::fs::copy(rel.join(from), &dst)
            .with_context(|| format!("copying {from} to {}", dst.display()))?;
    }
    Ok(tree)
}

/// Lease hand-offs of device 0 so far (from the arbiter's status file, at most 1 s old).
pub(super) fn handoffs0(arb: &Arbiter) -> u64 {
    arb.sched_status()
        .and_then(|v| v["devices"].as_array().cloned())
        .and_then(|d| d.into_iter().find(|d| d["index"] == 0))
        .and_then(|d| d["handoffs"].as_u64())
        .unwrap_or(0)
}

/// Min and max of tenant `i` over the 1 s windows.
pub(super) fn range_of(w1: &[Vec<f64>], i: usize) -> (f64, f64) {
    let v: Vec<f64> = w1.iter().map(|w| w[i]).collect();
    let lo = v.iter().copied().fold(1.0, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    (lo, hi)
}

pub(super) fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let g = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    g(11) + g(12)
}
