//! `GPUSLICE_SIM_TRACE`: the engine timeline every process of a node appends to one file
//! (`src/trace.rs`) agrees with the node's own accounting, on both engine models.

mod common;

use std::collections::HashMap;

use common::{engine_env, open, ChildProc};
use gpuslice_sim_core::now_ns;

const MS: u64 = 1_000_000;

/// Entry point of child processes (a no-op in the normal test run).
#[test]
fn child_main() {
    common::child_main();
}

/// `(pid, dev, from, to)` of every `run` line and the number of `kernel` lines per pid.
type Timeline = (Vec<(u32, u64, u64, u64)>, HashMap<u32, usize>);

fn read(path: &std::path::Path) -> Timeline {
    let text = std::fs::read_to_string(path).expect("the trace was written");
    let (mut runs, mut kernels) = (Vec::new(), HashMap::new());
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let n = |i: usize| -> u64 { f[i].parse().unwrap_or_else(|_| panic!("line {line:?}")) };
        match f[0] {
            "run" if f.len() == 5 => runs.push((n(1) as u32, n(2), n(3), n(4))),
            "kernel" if f.len() == 6 => {
                assert!(n(3) <= n(4) && n(4) < n(5), "ready ≤ start < end: {line:?}");
                *kernels.entry(n(1) as u32).or_insert(0) += 1;
            }
            _ => panic!("not a trace line: {line:?}"),
        }
    }
    (runs, kernels)
}

/// Two processes saturate device 0 with 3 ms kernels for 300 ms: per process, the traced runs
/// add up to what the node accounted, runs never overlap, and every kernel left a line.
#[test]
fn runs_add_up_to_the_accounted_busy_time_on_both_engines() {
    for mode in ["timeslice", "kernel"] {
        let mut env = engine_env("trace", mode);
        let path =
            std::env::temp_dir().join(format!("gpuslice-sim-trace-{}-{mode}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        env.insert("GPUSLICE_SIM_TRACE".into(), path.display().to_string());
        let node = open(&env);
        let start_at = now_ns() + 300 * MS;
        let extra = [
            ("KERNEL_NS", (3 * MS).to_string()),
            ("START_AT", start_at.to_string()),
            ("RUN_NS", (300 * MS).to_string()),
        ];
        let mut kids: Vec<ChildProc> = (0..2)
            .map(|_| ChildProc::spawn(&env, "saturate", &extra))
            .collect();
        for k in &mut kids {
            assert_eq!(k.line(), "ready");
        }
        for k in &mut kids {
            k.line();
        }
        let pids: Vec<u32> = kids.iter().map(ChildProc::pid).collect();
        let busy: Vec<u64> = pids.iter().map(|&p| node.process_busy_ns(0, p)).collect();
        for k in kids {
            assert!(k.finish(), "{mode}: a child failed");
        }
        let (mut runs, kernels) = read(&path);
        let _ = std::fs::remove_file(&path);
        runs.sort_by_key(|r| r.2);
        for w in runs.windows(2) {
            assert!(
                w[0].3 <= w[1].2,
                "{mode}: runs overlap: {:?} {:?}",
                w[0],
                w[1]
            );
        }
        for (&pid, &accounted) in pids.iter().zip(&busy) {
            let traced: u64 = runs.iter().filter(|r| r.0 == pid).map(|r| r.3 - r.2).sum();
            // Each child read its own busy time after its last kernel; the node's figure here
            // is read after both ended.
            let off = traced.abs_diff(accounted);
            assert!(
                off <= accounted / 100,
                "{mode}: pid {pid}: traced {traced} ns, accounted {accounted} ns"
            );
            let n = kernels.get(&pid).copied().unwrap_or(0);
            assert!(
                n as u64 * 3 * MS >= traced && n >= 40,
                "{mode}: pid {pid}: {n} kernel lines for {traced} ns of runs"
            );
        }
    }
}

/// A trace file that cannot be opened fails the node's opening, naming the variable and path.
#[test]
fn an_unopenable_trace_file_is_an_error_naming_it() {
    let mut env = common::small_env("trace-bad");
    env.insert(
        "GPUSLICE_SIM_TRACE".into(),
        "/nonexistent-gpuslice-dir/t".into(),
    );
    match gpuslice_sim_core::Node::open(common::config(&env)) {
        Err(gpuslice_sim_core::SimError::Config(m)) => assert!(
            m.contains("GPUSLICE_SIM_TRACE") && m.contains("/nonexistent-gpuslice-dir/t"),
            "{m}"
        ),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}
