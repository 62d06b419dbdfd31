//! Processes of other pid namespaces (containers) on one simulated node: a reader judges and
//! names them by the slot lock and the namespace it recorded, never by what their pid means in
//! the reader's own `/proc`. Each child runs as pid 1 of a new pid namespace, as a container's
//! exec'd worker does (as root, or in a user namespace of the caller's own otherwise).

mod common;

use common::{open, small_env, ChildProc};
use gpuslice_sim_core::now_ns;

const MI: u64 = 1 << 20;

/// Entry point of child processes (a no-op in the normal test run).
#[test]
fn child_main() {
    common::child_main();
}

#[test]
fn a_live_process_of_another_namespace_is_kept_and_named_by_host_pid() {
    let env = small_env("ns-keep");
    let node = open(&env);
    let mut held =
        ChildProc::spawn_in_pid_namespace(&env, "hold", &[("BYTES", (512 * MI).to_string())]);
    assert_eq!(
        held.line(),
        "ready 1",
        "the holder is pid 1 of its namespace"
    );
    let host_pid = held.inner_pid();
    // The host's /proc/1 is init, another process: the holder must still count as alive.
    assert_eq!(node.reap_dead(), 0, "a live process was reaped");
    assert_eq!(node.mem_used(0), 512 * MI);
    let procs = node.processes(0);
    assert!(
        procs
            .iter()
            .any(|p| p.pid == host_pid && p.used_bytes == 512 * MI),
        "the holder is listed by its host pid {host_pid}: {procs:?}"
    );
    assert!(procs.iter().all(|p| p.pid != 1), "{procs:?}");
    // A monitor in a sibling namespace (also pid 1 there) reaps nothing and cannot see it.
    let mut reader = ChildProc::spawn_in_pid_namespace(&env, "reader", &[]);
    let seen = reader.line();
    let mut f = seen.split(' ');
    assert_eq!(f.next(), Some("0"), "sibling reaped a live slot: {seen}");
    assert_eq!(f.next(), Some((512 * MI).to_string().as_str()), "{seen}");
    assert_eq!(
        f.next().unwrap_or(""),
        "",
        "sibling sees another namespace's pid: {seen}"
    );
    assert!(reader.finish());
    assert_eq!(
        node.mem_used(0),
        512 * MI,
        "memory survived the sibling monitor"
    );
    // Once it is killed, its memory comes back (unshare's death kills it, asynchronously).
    // Not as soon as its leader shows `Z`: its other threads may still be exiting and holding
    // its descriptors (the slot's lock among them), as the driver's would be.
    held.kill9();
    let t0 = std::time::Instant::now();
    loop {
        match node.mem_alloc(0, 600 * MI) {
            Ok(_) => break,
            Err(e) => assert!(
                t0.elapsed().as_secs() < 10,
                "dead holder {host_pid}'s memory not reclaimed 10 s after its kill: {e:?}"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(node.processes(0).iter().all(|p| p.pid != host_pid));
}

#[test]
fn two_containers_inits_share_the_engine_while_the_host_monitors() {
    let env = small_env("ns-share");
    let node = open(&env);
    let start_at = now_ns() + 600_000_000;
    let run = 2_000_000_000u64;
    let extra = [
        ("KERNEL_NS", "5000000".to_string()),
        ("START_AT", start_at.to_string()),
        ("RUN_NS", run.to_string()),
    ];
    // Both are pid 1 of their namespace and likely share a start tick.
    let mut kids: Vec<ChildProc> = (0..2)
        .map(|_| ChildProc::spawn_in_pid_namespace(&env, "saturate", &extra))
        .collect();
    for k in &mut kids {
        assert_eq!(k.line(), "ready");
    }
    // The host polls NVML-style queries all through the run, as the arbiter's backstop does.
    let mut listed_both = 0;
    while now_ns() < start_at + run {
        node.reap_dead();
        if node.process_utilization(0, 0).len() == 2 {
            listed_both += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let res: Vec<(u64, u64, u64)> = kids
        .iter_mut()
        .map(|k| {
            let l = k.line();
            let v: Vec<u64> = l.split(' ').map(|x| x.parse().expect("num")).collect();
            (v[0], v[1], v[2])
        })
        .collect();
    for k in kids {
        assert!(k.finish());
    }
    let first = res.iter().map(|r| r.0).min().unwrap();
    let last = res.iter().map(|r| r.1).max().unwrap();
    let el = (last - first) as f64;
    let shares: Vec<f64> = res.iter().map(|r| r.2 as f64 / el).collect();
    eprintln!("shares {shares:?}; host listed both in {listed_both} polls");
    for s in &shares {
        assert!(
            (0.40..=0.60).contains(s),
            "share {s} not 50 ± 10 % ({shares:?})"
        );
    }
    assert!(
        listed_both > 50,
        "the host lost sight of a live process ({listed_both} polls)"
    );
}
