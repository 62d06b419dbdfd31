//! Cross-process behaviour of the simulated node: memory accounting, reclaim, re-init, engine.

mod common;

use std::time::{Duration, Instant};

use common::{config, env_for, open, small_env, ChildProc};
use gpuslice_sim_core::liveness::LockFile;
use gpuslice_sim_core::{now_ns, sleep_until, Node, SimError};

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

/// Entry point of child processes (a no-op in the normal test run).
#[test]
fn child_main() {
    common::child_main();
}

#[test]
fn oom_exactly_at_capacity() {
    let env = small_env("oom");
    let node = open(&env);
    assert_eq!(node.mem_total(0), GI);
    node.mem_alloc(0, GI - 4096).expect("fits");
    node.mem_alloc(0, 4096).expect("exactly at capacity fits");
    assert_eq!(node.mem_used(0), GI);
    match node.mem_alloc(0, 1) {
        Err(SimError::OutOfMemory { free, total, .. }) => {
            assert_eq!(free, 0);
            assert_eq!(total, GI);
        }
        other => panic!("expected OOM, got {other:?}"),
    }
    node.mem_free(0, 1);
    node.mem_alloc(0, 1).expect("one byte freed, one byte fits");
    assert!(matches!(
        node.mem_alloc(1, 1),
        Err(SimError::InvalidDevice(1))
    ));
    node.mem_free(0, GI);
    assert_eq!(node.mem_used(0), 0);
    // freeing more than held never goes below zero nor steals others' bytes
    node.mem_free(0, GI);
    assert_eq!(node.mem_used(0), 0);
}

#[test]
fn context_overhead_is_charged() {
    let env = env_for("ctx", &[("GPUSLICE_SIM_CTX_OVERHEAD", "300Mi")]);
    let node = open(&env);
    node.ctx_attach(0).expect("ctx");
    node.ctx_attach(0).expect("second ctx");
    assert_eq!(node.mem_used(0), 600 * MI);
    let me = std::process::id();
    let procs = node.processes(0);
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].pid, me);
    assert_eq!(procs[0].used_bytes, 600 * MI);
    node.ctx_detach(0);
    node.ctx_detach(0);
    node.ctx_detach(0); // one too many: ignored
    assert_eq!(node.mem_used(0), 0);
    assert!(node.processes(0).is_empty());
}

#[test]
fn concurrent_allocation_never_exceeds_capacity() {
    let env = small_env("concurrent");
    let node = open(&env);
    let start_at = (now_ns() + 300_000_000).to_string();
    let chunk = (7 * MI).to_string(); // 1 GiB / 7 MiB = 146 chunks, 2 MiB left over
    let mut kids: Vec<ChildProc> = (0..4)
        .map(|_| {
            ChildProc::spawn(
                &env,
                "alloc_until_oom",
                &[("CHUNK", chunk.clone()), ("START_AT", start_at.clone())],
            )
        })
        .collect();
    let counts: Vec<u64> = kids
        .iter_mut()
        .map(|k| k.line().parse().expect("count"))
        .collect();
    let total: u64 = counts.iter().sum();
    assert_eq!(total, GI / (7 * MI), "per-child counts {counts:?}");
    assert_eq!(node.mem_used(0), total * 7 * MI);
    assert!(node.mem_used(0) <= GI);
    let pids: Vec<u32> = kids.iter().map(|k| k.pid()).collect();
    let mut listed: Vec<u32> = node.processes(0).iter().map(|p| p.pid).collect();
    listed.sort_unstable();
    let mut expect: Vec<u32> = pids
        .iter()
        .zip(&counts)
        .filter(|(_, &c)| c > 0)
        .map(|(p, _)| *p)
        .collect();
    expect.sort_unstable();
    assert_eq!(listed, expect);
    for k in kids {
        assert!(k.finish());
    }
    // exited processes' memory is reclaimed
    assert_eq!(node.mem_used(0), 0);
}

#[test]
fn sigkilled_process_memory_is_reclaimed() {
    let env = small_env("reclaim");
    let node = open(&env);
    let mut kid = ChildProc::spawn(&env, "hold", &[("BYTES", (512 * MI).to_string())]);
    assert!(kid.line().starts_with("ready "));
    let pid = kid.pid();
    let procs = node.processes(0);
    assert!(
        procs
            .iter()
            .any(|p| p.pid == pid && p.used_bytes == 512 * MI),
        "{procs:?}"
    );
    assert!(
        node.mem_alloc(0, 600 * MI).is_err(),
        "only 512 MiB are free"
    );
    kid.kill9();
    // the allocation that failed before succeeds now: OOM path reaps the dead
    node.mem_alloc(0, 600 * MI)
        .expect("dead process's memory reclaimed");
    assert_eq!(node.mem_used(0), 600 * MI);
    assert!(node.processes(0).iter().all(|p| p.pid != pid));
}

/// A reaper (or a process claiming the slot) holds a dead owner's slot byte while it releases
/// the slot, and can be descheduled there for milliseconds. The driver freed that process's
/// memory when its descriptors closed: what the simulator reports must not wait for the reaper.
#[test]
fn a_dead_process_is_not_counted_while_a_reaper_holds_its_slot() {
    let env = small_env("stuck-reaper");
    let node = open(&env);
    let mut kid = ChildProc::spawn(&env, "hold", &[("BYTES", (512 * MI).to_string())]);
    assert!(kid.line().starts_with("ready "));
    let pid = kid.pid();
    // The child took the first slot: nobody else has used this node yet.
    let reaper = LockFile::open(&config(&env).state_path).expect("lock description");
    assert!(reaper.held_by_other(0), "the child owns slot 0");
    kid.kill9();
    assert!(
        reaper.try_lock(0).expect("lock"),
        "the dead child's byte is free"
    );
    // Descheduled halfway: the slot still holds the child's figures.
    assert_eq!(
        node.reap_dead(),
        0,
        "the slot is ours to reap, nobody else's"
    );
    assert_eq!(node.mem_used(0), 0, "a gone process's memory counted");
    assert!(
        node.processes(0).iter().all(|p| p.pid != pid),
        "a gone process listed: {:?}",
        node.processes(0)
    );
    // The reaper goes away without finishing; the next one does. A child another test of this
    // binary forks may hold a copy of the reaper's descriptor (and so its lock) until it execs.
    drop(reaper);
    let mut reaped = node.reap_dead();
    for _ in 0..100 {
        if reaped != 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        reaped = node.reap_dead();
    }
    assert_eq!(reaped, 1);
    assert_eq!(node.mem_used(0), 0);
    node.mem_alloc(0, 600 * MI).expect("the memory is free");
}

#[test]
fn reinit_on_config_change_only_when_unused() {
    let env_a = small_env("reinit");
    {
        let node = open(&env_a);
        node.mem_alloc(0, MI).expect("alloc");
    }
    // Nobody attached: a different configuration re-initialises the file.
    let mut env_b = env_a.clone();
    env_b.insert("GPUSLICE_SIM_DEVICES".into(), "mem=2Gi".into());
    {
        // A child another test forks may hold a copy of our descriptor until it execs.
        let mut tries = 0;
        let node = loop {
            match Node::open(common::config(&env_b)) {
                Ok(n) => break n,
                Err(SimError::State(m)) if tries < 50 && m.contains("in use") => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("node opens: {e:?}"),
            }
        };
        assert_eq!(node.mem_total(0), 2 * GI);
        assert_eq!(node.mem_used(0), 0);
    }
    // A live process holds it with config A: config B is refused, naming the file.
    let _ = open(&env_a);
    let mut kid = ChildProc::spawn(&env_a, "hold", &[("BYTES", MI.to_string())]);
    assert!(kid.line().starts_with("ready "));
    let err = Node::open(common::config(&env_b)).expect_err("in use with another config");
    let path = env_a["GPUSLICE_SIM_STATE"].clone();
    match &err {
        SimError::State(m) => assert!(m.contains(&path), "{m}"),
        other => panic!("expected State error, got {other:?}"),
    }
    // Same config attaches fine and sees the child's usage.
    let same = open(&env_a);
    assert_eq!(same.mem_used(0), MI);
    assert!(kid.finish());
}

#[test]
fn short_kernels_take_their_duration() {
    let env = small_env("precision");
    let node = open(&env);
    let t0 = Instant::now();
    let mut last_end = 0;
    for _ in 0..200 {
        let t = node.engine_execute(0, 50_000);
        assert_eq!(t.end_ns - t.start_ns, 50_000);
        assert!(t.start_ns >= last_end, "kernels overlap");
        assert!(now_ns() >= t.end_ns, "returned before the kernel ended");
        last_end = t.end_ns;
    }
    let el = t0.elapsed();
    assert!(el >= Duration::from_millis(10), "{el:?}");
    // generous: a sleep-granularity bug would make this >= 200 ms
    assert!(el < Duration::from_millis(100), "{el:?}");
    let busy = node.process_busy_ns(0, std::process::id());
    assert_eq!(busy, 200 * 50_000);
    assert_eq!(node.device_busy_ns(0), 200 * 50_000);
}

#[test]
fn threads_of_one_process_never_overlap() {
    let env = small_env("threads");
    let node = open(&env);
    let timings = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..20 {
                    let t = node.engine_execute(0, 1_000_000);
                    timings.lock().unwrap().push(t);
                }
            });
        }
    });
    let mut t = timings.into_inner().unwrap();
    t.sort_by_key(|k| k.start_ns);
    assert_eq!(t.len(), 80);
    for w in t.windows(2) {
        assert!(w[1].start_ns >= w[0].end_ns, "{w:?}");
    }
    // busy 80 ms within the last second: utilisation well above zero
    assert!(node.utilization(0) >= 4, "util {}", node.utilization(0));
    assert_eq!(node.ctx_switches(0), 0, "one process: no context switches");
}

struct RunResult {
    first: u64,
    last: u64,
    busy: u64,
}

fn contend(test: &str, kernel_ns: u64, run_ns: u64) -> Vec<RunResult> {
    let env = small_env(test);
    let _node = open(&env);
    let start_at = now_ns() + 500_000_000;
    let extra = [
        ("KERNEL_NS", kernel_ns.to_string()),
        ("START_AT", start_at.to_string()),
        ("RUN_NS", run_ns.to_string()),
    ];
    let mut kids: Vec<ChildProc> = (0..2)
        .map(|_| ChildProc::spawn(&env, "saturate", &extra))
        .collect();
    for k in &mut kids {
        assert_eq!(k.line(), "ready");
    }
    let res = kids
        .iter_mut()
        .map(|k| {
            let l = k.line();
            let v: Vec<u64> = l.split(' ').map(|x| x.parse().expect("num")).collect();
            RunResult {
                first: v[0],
                last: v[1],
                busy: v[2],
            }
        })
        .collect();
    for k in kids {
        assert!(k.finish());
    }
    res
}

fn span(r: &[RunResult]) -> u64 {
    r.iter().map(|x| x.last).max().unwrap() - r.iter().map(|x| x.first).min().unwrap()
}

#[test]
fn two_processes_share_the_engine_fairly() {
    let r = contend("fair", 5_000_000, 3_000_000_000);
    let el = span(&r) as f64;
    let shares: Vec<f64> = r.iter().map(|x| x.busy as f64 / el).collect();
    let sum: f64 = shares.iter().sum();
    eprintln!("5 ms kernels: shares {shares:?}, sum {sum}");
    for s in &shares {
        assert!(
            (0.40..=0.60).contains(s),
            "share {s} not 50 ± 10 % ({shares:?})"
        );
    }
    assert!(sum <= 1.0, "together more than 100 %: {sum}");
}

#[test]
fn short_kernels_busy_never_exceeds_elapsed() {
    for (name, k) in [("c1ms", 1_000_000u64), ("c50us", 50_000)] {
        let r = contend(name, k, 1_000_000_000);
        let el = span(&r);
        let busy: u64 = r.iter().map(|x| x.busy).sum();
        eprintln!("{k} ns kernels: busy {busy} of {el}");
        assert!(busy <= el, "busy {busy} > elapsed {el}");
        assert!(r.iter().all(|x| x.busy > 0), "a process starved");
    }
}

#[test]
fn sigkill_mid_run_does_not_wedge_the_other() {
    let env = small_env("killrun");
    let node = open(&env);
    let start_at = now_ns() + 400_000_000;
    let run = 2_000_000_000u64;
    let extra = [
        ("KERNEL_NS", "5000000".to_string()),
        ("START_AT", start_at.to_string()),
        ("RUN_NS", run.to_string()),
    ];
    let mut victim = ChildProc::spawn(&env, "saturate", &extra);
    let mut survivor = ChildProc::spawn(&env, "saturate", &extra);
    assert_eq!(victim.line(), "ready");
    assert_eq!(survivor.line(), "ready");
    sleep_until(start_at + 500_000_000);
    let vpid = victim.pid();
    victim.kill9();
    let t0 = Instant::now();
    let l = survivor.line();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "survivor took {:?}",
        t0.elapsed()
    );
    let v: Vec<u64> = l.split(' ').map(|x| x.parse().expect("num")).collect();
    let (first, last, busy) = (v[0], v[1], v[2]);
    let share = busy as f64 / (last - first) as f64;
    eprintln!("survivor share after kill: {share}");
    // ~25 % before the kill (0.5 s at half), ~75 % after: alone it gets the whole engine
    assert!(share > 0.6, "survivor share {share}");
    assert!(node.processes(0).iter().all(|p| p.pid != vpid));
    assert!(survivor.finish());
}
