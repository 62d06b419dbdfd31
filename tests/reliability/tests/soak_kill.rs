//! The kill soak: on a simulator with the H200's context, module and NVML-sampling costs
//! (issue 32), with `memory_action` and `lease_action` both `"kill"`, honest interposed tenants of every workload
//! shape the scheduler must charge right — CUDA graphs of 100 × 1 ms kernel nodes, 50 ms kernels,
//! a deep asynchronous queue (1 ms × 1000 in flight), 50 µs kernels, a bursty high-priority
//! request loop (1 ms every 20 ms), a saturating 1 ms tenant and a slice of several processes —
//! share one device for the whole soak and none of them may be killed or flagged; halfway
//! through, a tenant that calls the driver around the interposer (`env -u LD_PRELOAD`, the
//! workload linked to `libcuda` directly) joins and must still be killed.
//!
//! Duration: `GPUSLICE_SOAK_SECONDS`, else 600 s × `GPUSLICE_TRIALS_SCALE` (at least 20 s; `cargo
//! xtask test reliability` runs it at 0.1, 60 s). The full 10 minutes, by hand:
//! `GPUSLICE_TRIALS_SCALE=1 cargo test -p gpuslice-reliability --test soak_kill -- --nocapture`
//! (`GPUSLICE_SIM_ENGINE=kernel` for the non-preemptive engine). It prints, per slice, its
//! device time from the simulator's own clock over the soak, its own report and the backstop's
//! lines about it (`docs/reliability.md`, trial 21).

use gpuslice_reliability::node::{profile_dir, NodeConfig};
use gpuslice_reliability::{scaled, Node, Tenant};
use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// One honest slice: id, request (JSON members), what it runs (`gpuslice-workload` arguments
/// after the global ones, with `{s}` for the duration), the line its report starts with.
const HONEST: [(&str, &str, &str, &str); 7] = [
    (
        "graphs",
        "\"compute\":15",
        "saturate --graph-nodes 100 --kernel-us 1000 --depth 2 --seconds {s}",
        "kernels=",
    ),
    (
        "long",
        "\"compute\":15",
        "saturate --kernel-us 50000 --depth 8 --seconds {s}",
        "kernels=",
    ),
    (
        "deep",
        "\"compute\":15",
        "saturate --kernel-us 1000 --depth 1000 --seconds {s}",
        "kernels=",
    ),
    (
        "small",
        "\"compute\":15",
        "saturate --kernel-us 50 --depth 64 --seconds {s}",
        "kernels=",
    ),
    (
        "bursty",
        "\"compute\":5,\"priority\":\"high\"",
        "bursty --kernel-us 1000 --rate 50 --seconds {s}",
        "requests=",
    ),
    (
        "sat",
        "\"compute\":15",
        "saturate --kernel-us 1000 --depth 4 --seconds {s}",
        "kernels=",
    ),
    (
        "multi",
        "\"compute\":15",
        "contend --procs 3 --kernel-us 1000 --seconds {s}",
        "total_share=",
    ),
];

/// The soak's length: `GPUSLICE_SOAK_SECONDS`, else 600 s scaled (at least 20 s).
fn soak_seconds() -> u64 {
    match std::env::var("GPUSLICE_SOAK_SECONDS") {
        Ok(v) => match v.parse::<u64>() {
            Ok(s) if s >= 10 => s,
            _ => panic!("GPUSLICE_SOAK_SECONDS={v:?}: a whole number of seconds, at least 10"),
        },
        Err(_) => scaled(600, 20),
    }
}

/// The parent of `pid` (from `/proc/<pid>/stat`).
fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid …": comm may hold spaces, so read after the last ')'.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The index in `owners` of the slice a process belongs to: its own pid or an ancestor's.
fn slice_of(pid: u32, owners: &[u32]) -> Option<usize> {
    let mut p = pid;
    for _ in 0..8 {
        if let Some(i) = owners.iter().position(|&o| o == p) {
            return Some(i);
        }
        p = ppid(p).filter(|&q| q > 1)?;
    }
    None
}

/// Device time so far (ns) of every live process of the simulated device, with its slice.
fn busy_by_pid(sim: &gpuslice_sim_core::Node, owners: &[u32]) -> HashMap<u32, (usize, u64)> {
    sim.processes(0)
        .into_iter()
        .filter_map(|p| {
            let slice = slice_of(p.pid, owners)?;
            Some((p.pid, (slice, sim.process_busy_ns(0, p.pid))))
        })
        .collect()
}

/// Share of the device (percent) of each slice between two samples `secs` apart, over the
/// processes alive at both.
fn shares(
    a: &HashMap<u32, (usize, u64)>,
    b: &HashMap<u32, (usize, u64)>,
    slices: usize,
    secs: f64,
) -> Vec<f64> {
    let mut out = vec![0.0; slices];
    for (pid, (slice, busy_b)) in b {
        if let Some((_, busy_a)) = a.get(pid) {
            out[*slice] += busy_b.saturating_sub(*busy_a) as f64 / 1e9 / secs * 100.0;
        }
    }
    out
}

/// The arbiter's backstop lines about slice `id`.
fn backstop_lines<'a>(log: &'a str, id: &str) -> Vec<&'a str> {
    let tag = format!("backstop: slice {id}:");
    log.lines().filter(|l| l.contains(&tag)).collect()
}

/// The machine's load averages (the soak shares the CPUs with whatever else runs).
fn loadavg() -> String {
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn sleep_until(t0: Instant, at: Duration) {
    if let Some(d) = at.checked_sub(t0.elapsed()) {
        std::thread::sleep(d);
    }
}

#[test]
fn honest_shapes_are_never_killed_and_a_bypass_still_is() {
    let secs = soak_seconds();
    let linked = profile_dir().join("gpuslice-workload-linked");
    assert!(
        linked.exists(),
        "{} missing: cargo build -p gpuslice-workloads",
        linked.display()
    );
    // The H200's costs (issue 32): 518 MiB contexts, 64 MiB lazy module loads, NVML samples
    // of 200 ms windows credited to one process; the arbiter measures the contexts and charges
    // its defaults. The `[backstop]` table follows the (empty) `[admission]` lines.
    let config = NodeConfig {
        devices: "name=Soak GPU 16G,mem=16Gi,sms=16,cc=9.0,ctx=518Mi,module=64Mi".into(),
        ctx_overhead: "518Mi".into(),
        admission: "[backstop]\nmemory_action = \"kill\"\nlease_action = \"kill\"\n".into(),
    };
    let n = Node::start_with("soak", config).expect("node");
    let sim = n.sim_reader().expect("simulator state");
    let engine = std::env::var("GPUSLICE_SIM_ENGINE").unwrap_or_else(|_| "timeslice".into());
    println!(
        "soak: {secs} s, engine {engine}, lease_action = \"kill\", {} honest slices; load {}",
        HONEST.len(),
        loadavg()
    );
    let w = profile_dir().join("gpuslice-workload");
    assert!(w.to_str().is_some(), "{}: not UTF-8", w.display());
    let mut tenants: Vec<Tenant> = Vec::new();
    for (id, request, work, _) in HONEST {
        let work = work.replace("{s}", &secs.to_string());
        // Its stderr (the interposer's messages) into a file of its own, through one more
        // exec of the same process.
        let stderr = n.dir.join(format!("{id}.stderr"));
        let redirect = format!("exec \"$0\" \"$@\" 2>{}", stderr.display());
        let args: Vec<&str> = ["-c", &redirect, w.to_str().expect("utf-8 path")]
            .into_iter()
            .chain(["--via", "dlsym", "--hold", "256Mi"])
            .chain(work.split_whitespace())
            .collect();
        // Four processes with a context each (the workload and its three children): a cap
        // their contexts fit in beside the one the reserve covers.
        let memory = if id == "multi" { "3Gi" } else { "512Mi" };
        let request = format!("\"memory\":\"{memory}\",{request}");
        tenants.push(n.spawn_owner(id, &request, Path::new("/bin/sh"), &args));
    }
    let mut owners: Vec<u32> = tenants.iter().map(Tenant::pid).collect();
    let t0 = Instant::now();
    for t in tenants.iter_mut() {
        t.send("go").expect("start a tenant");
    }

    // Ground truth from 5 s in (every process has its context) to 3 s before the end.
    let (from, to) = (Duration::from_secs(5), Duration::from_secs(secs - 3));
    sleep_until(t0, from);
    let sample_a = (t0.elapsed(), busy_by_pid(&sim, &owners));

    // Halfway: the bypassing tenant, in a slice of its own.
    sleep_until(t0, Duration::from_secs(secs / 2));
    let bypass_args = [
        "-u",
        "LD_PRELOAD",
        linked.to_str().expect("utf-8 path"),
        "--via",
        "link",
        "saturate",
        "--kernel-us",
        "1000",
        "--depth",
        "4",
        "--seconds",
        "60",
    ];
    let mut bad = n.spawn_owner(
        "bypass",
        "\"memory\":\"512Mi\"",
        Path::new("/usr/bin/env"),
        &bypass_args,
    );
    owners.push(bad.pid());
    let bad_pid = bad.pid();
    bad.send("go").expect("start the bypassing tenant");
    let t_bad = Instant::now();
    let bad_exit = bad.finish(Duration::from_secs(30));
    let bad_took = t_bad.elapsed();

    sleep_until(t0, to);
    let sample_b = (t0.elapsed(), busy_by_pid(&sim, &owners));
    let span = (sample_b.0 - sample_a.0).as_secs_f64();
    let got = shares(&sample_a.1, &sample_b.1, owners.len(), span);

    let mut problems = Vec::new();
    let mut reports = Vec::new();
    for ((id, _, _, prefix), t) in HONEST.iter().zip(tenants.iter_mut()) {
        match t.expect(prefix, Duration::from_secs(secs + 120)) {
            Ok(line) => reports.push(line),
            Err(e) => {
                let st = t.exited().ok().flatten();
                problems.push(format!("{id}: {e} (exit {st:?})"));
                reports.push("(no report)".into());
            }
        }
    }
    let log = n.log();
    println!(
        "{:<8} {:>8}  {:<62} backstop  fail-open",
        "slice", "share", "its own report"
    );
    for (i, (id, _, _, _)) in HONEST.iter().enumerate() {
        let lines = backstop_lines(&log, id);
        // Processes whose interposer waited 30 s for a lease and launched without one ("the
        // arbiter seems gone"; said once per process, every such wait launches): not an action
        // of the backstop, but a slice the scheduler starved.
        let stderr = std::fs::read_to_string(n.dir.join(format!("{id}.stderr")));
        let fail_open = stderr
            .as_deref()
            .unwrap_or("")
            .matches("no lease granted for")
            .count();
        println!(
            "{id:<8} {:>7.1}%  {:<62} {:>8}  {fail_open:>9}",
            got[i],
            reports[i],
            lines.len()
        );
        for l in &lines {
            problems.push(format!("honest slice {id} was acted on: {l}"));
        }
    }
    println!("load at the end: {}", loadavg());
    // (The bypassing tenant is not alive at both samples: its time is not in the sum.)
    println!(
        "device: {:.1}% busy with honest slices from {:.0} s to {:.0} s",
        got[..HONEST.len()].iter().sum::<f64>(),
        sample_a.0.as_secs_f64(),
        sample_b.0.as_secs_f64()
    );
    let bad_lines = backstop_lines(&log, "bypass");
    match &bad_exit {
        Ok(st) if st.signal() == Some(libc::SIGKILL) => {
            println!("bypass: SIGKILLed {bad_took:.2?} after it started");
        }
        other => problems.push(format!(
            "the bypassing tenant was not killed: {other:?} after {bad_took:?}; output {:?}",
            bad.output
        )),
    }
    let killed = format!("killed pid {bad_pid}");
    if !bad_lines.iter().any(|l| l.contains(&killed)) {
        problems.push(format!(
            "no backstop line kills the bypassing pid {bad_pid}: {bad_lines:?}"
        ));
    }
    for l in &bad_lines {
        println!("  {l}");
    }
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}\narbiter log (backstop lines):\n{}",
        problems.len(),
        problems.join("\n"),
        log.lines()
            .filter(|l| l.contains("backstop"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
