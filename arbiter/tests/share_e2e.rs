//! End to end on the simulated GPU: the real `gpuslice-arbiter` admits two slices with
//! guarantees 30/70, two saturating `gpuslice-workload` processes run under `libgpuslice.so` in
//! them, and the kernels each completed must split about 30/70 (generous tolerance: ±8 points
//! over 3 s on a shared 2-core machine). Also: a live memory-cap update reaches the slice's
//! `limits` file within 100 ms.
//!
//! Needs the simulator, the interposer and the workload built into the same target directory:
//! `cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml -p gpuslice-interposer -p gpuslice-workloads`.

use gpuslice_test_support::{profile_dir, NodeConfig, SimNode};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The simulated node with this build's arbiter.
struct Node(SimNode);

impl Node {
    fn start(tag: &str) -> Node {
        Node(SimNode::start(
            &format!("h7-{tag}"),
            NodeConfig {
                config: "[admission]\ncontext_reserve = \"16Mi\"\nmodule_allowance = \"0\"\n"
                    .into(),
                log_level: "warn".into(),
                needs: vec!["gpuslice-workload"],
                ..NodeConfig::default()
            },
        ))
    }

    fn req(&self, body: &str) -> String {
        let answer = self.0.call(&format!("{{\"version\":1,{body}}}"));
        let line = answer.to_string();
        assert!(answer["result"] != "error", "{body}: {line}");
        line
    }

    fn admit(&self, id: &str, request: &str) -> PathBuf {
        self.req(&format!(
            "\"op\":\"admit\",\"slice_id\":\"{id}\",\"request\":{{{request}}}"
        ));
        self.0.state_dir().join(id)
    }

    fn tenant(&self, slice: &Path, args: &[&str]) -> Child {
        let prof = profile_dir();
        let mut c = self.0.command(prof.join("gpuslice-workload"));
        c.args(["--via", "dlsym"])
            .args(args)
            .env("LD_PRELOAD", prof.join("libgpuslice.so"))
            .env("GPUSLICE_SLICE_DIR", slice)
            .stdout(Stdio::piped());
        c.spawn().expect("starting a tenant")
    }
}

/// The workload's arguments for a tenant launching 1 ms kernels for 3 s, `depth` queued.
fn saturate_1ms_3s(depth: &str) -> [&str; 7] {
    [
        "saturate",
        "--kernel-us",
        "1000",
        "--seconds",
        "3",
        "--depth",
        depth,
    ]
}

fn kernels(c: Child) -> u64 {
    let o = c.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "tenant failed: {text}");
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix("kernels="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no kernels= in {text}"))
}

#[test]
fn guarantees_30_70_split_the_device() {
    let n = Node::start("3070");
    let a = n.admit("a", "\"compute\":30,\"memory\":\"1Gi\"");
    let b = n.admit("b", "\"compute\":70,\"memory\":\"1Gi\"");
    let args = saturate_1ms_3s("8");
    let ta = n.tenant(&a, &args);
    let tb = n.tenant(&b, &args);
    let (ka, kb) = (kernels(ta), kernels(tb));
    let share = ka as f64 / (ka + kb) as f64;
    assert!(
        (share - 0.30).abs() <= 0.08,
        "A ran {ka} kernels, B {kb}: A's share {share:.3}, wanted 0.30 ± 0.08"
    );
    // Both made progress: the device was not left idle for long.
    assert!(ka + kb > 1500, "only {} kernels of 1 ms in 3 s", ka + kb);
}

#[test]
fn memory_update_reaches_the_limits_file_at_once() {
    let n = Node::start("resize");
    let a = n.admit("a", "\"compute\":30,\"memory\":\"1Gi\"");
    let limits = gpuslice_region::Limits::open(&a).expect("limits");
    assert_eq!(limits.memory_cap(0), 1 << 30);
    let t0 = Instant::now();
    n.req("\"op\":\"update\",\"slice_id\":\"a\",\"memory\":\"512Mi\",\"compute\":40");
    while limits.memory_cap(0) != 512 << 20 {
        assert!(t0.elapsed() < Duration::from_millis(100), "cap not updated");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(limits.device(0).map(|d| d.compute_guarantee), Some(4000));
}

/// A `priority: high` request tenant beside a saturating neighbour: its requests' first
/// launches go on the one-launch pass the arbiter arms in its lease slot (the slice's `passed`
/// word takes the pass ids, and the slice is granted under them), and no demand is left
/// claimed once the tenant is gone.
#[test]
fn high_priority_requests_launch_on_their_passes() {
    use gpuslice_region::layout::LEASE_HELD;
    use gpuslice_region::{Lease, Usage};
    use std::collections::BTreeSet;
    use std::sync::atomic::Ordering::Relaxed;

    let n = Node::start("pass");
    let t = n.admit("train", "\"compute\":50,\"memory\":\"1Gi\"");
    let h = n.admit(
        "infer",
        "\"compute\":20,\"priority\":\"high\",\"memory\":\"1Gi\"",
    );
    let tn = n.tenant(&t, &saturate_1ms_3s("64"));
    std::thread::sleep(Duration::from_millis(300));
    let mut th = n.tenant(
        &h,
        &[
            "bursty",
            "--kernel-us",
            "1000",
            "--rate",
            "50",
            "--seconds",
            "2",
        ],
    );
    let lease = Lease::open(&h).unwrap();
    let usage = Usage::open(&h, 1).unwrap();
    let words = usage.gate_words(0).unwrap();
    let (mut taken, mut granted) = (BTreeSet::new(), BTreeSet::new());
    let until = Instant::now() + Duration::from_secs(10);
    while th.try_wait().unwrap().is_none() && Instant::now() < until {
        let p = words.passed.load(Relaxed);
        if p != 0 {
            taken.insert(p);
        }
        if lease.word(0).unwrap().load() & LEASE_HELD != 0 {
            granted.insert(lease.grant(0));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let out = th.wait_with_output().unwrap();
    let st = n.0.call("{\"version\":1,\"op\":\"status\"}");
    assert!(out.status.success(), "request tenant failed");
    let under_pass = taken.intersection(&granted).count();
    eprintln!(
        "{} passes taken, {under_pass} seen granted, {} grants seen",
        taken.len(),
        granted.len()
    );
    // 100 requests, each after an idle spell: each takes a pass (measured: 101 of 101, all
    // seen granted; polling every 200 µs on a loaded host may miss some).
    assert!(
        taken.len() >= 50 && under_pass >= 30,
        "{} passes taken, {under_pass} of them seen granted",
        taken.len()
    );
    // An honest request tenant is never taken for one that claims demand without launching.
    let infer = st["devices"][0]["shares"]
        .as_array()
        .and_then(|v| v.iter().find(|s| s["slice_id"] == "infer"))
        .cloned()
        .unwrap_or_else(|| panic!("no share of infer in {st}"));
    assert_eq!(infer["strikes_total"].as_u64().unwrap_or(0), 0, "{infer}");
    kernels(tn);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(words.demand.load(Relaxed), 0, "demand left claimed");
}

/// A graph captured as PyTorch captures one (side stream forked and joined through events,
/// kernels on both, a memset, an allocation in the graph's pool), in each capture mode, inside
/// a 30 % slice while a 70 % neighbour saturates the device: every capture succeeds (the
/// gate's own calls neither invalidate it nor hand it an error), and the replays then hold the
/// 30/70 split over 10 s: within 5 points here (measured 28.3–28.9 % on a quiet host, 24–27 %
/// while other builds loaded the 2 cores eightfold, 28.1–28.7 % at load 6–7; the issue's ±2
/// is the real GPU's check), and the scheduler's charge within 2 points.
/// On the real H200 the gate broke such captures (`docs/scheduling.md`, "Stream capture").
#[test]
fn graphs_captured_beside_a_saturating_neighbour_replay_at_30_70() {
    let n = Node::start("capture");
    let a = n.admit("a", "\"compute\":30,\"memory\":\"1Gi\"");
    let b = n.admit("b", "\"compute\":70,\"memory\":\"1Gi\"");
    let tb = n.tenant(
        &b,
        &[
            "saturate",
            "--kernel-us",
            "1000",
            "--seconds",
            "11",
            "--depth",
            "8",
        ],
    );
    // The neighbour holds the device when the capture begins: the device is shared.
    std::thread::sleep(Duration::from_millis(300));
    let ta = n.tenant(
        &a,
        &[
            "capture",
            "--mode",
            "all",
            "--kernel-us",
            "500",
            "--kernels",
            "8",
            "--seconds",
            "10",
        ],
    );
    let o = ta.wait_with_output().unwrap();
    // The scheduler's own 10 s figure for the slice, read as its replays end.
    let st = n.0.call("{\"version\":1,\"op\":\"status\"}");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "capture tenant failed: {text} {err}");
    assert!(
        text.contains("captured=global,thread_local,relaxed"),
        "{text}"
    );
    let share = text
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("share="))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no share= in {text}"));
    let kb = kernels(tb);
    eprintln!("30 % slice's replays: {share:.4} of the device; neighbour: {kb} kernels of 1 ms");
    assert!(
        (share - 0.30).abs() <= 0.05,
        "the 30 % slice's replays got {share:.3} of the device over 10 s, wanted 0.30 ± 0.05"
    );
    // What the scheduler charged the slice over those 10 s holds the ±2 points (measured
    // 29.9–30.0 %): the replays' shortfall is the time from each grant to the slice's first
    // graph on the device (its queue is empty at a grant), a host wake-up per grant.
    let charged = st["devices"][0]["shares"]
        .as_array()
        .and_then(|v| v.iter().find(|s| s["slice_id"] == "a"))
        .and_then(|s| s["achieved_10s_bp"].as_u64())
        .unwrap_or_else(|| panic!("no 10 s share of slice a in {st}"));
    eprintln!("30 % slice charged over 10 s: {charged} bp");
    assert!(
        charged.abs_diff(3000) <= 200,
        "the scheduler charged the 30 % slice {charged} bp over 10 s, wanted 3000 ± 200"
    );
}
