//! Honest tenants on a simulator that costs what the real driver costs (issue 32): a context of
//! 518 MiB, 64 MiB more at a module's first launch (lazy loading), and NVML process samples of
//! 200 ms windows each credited to one process. On the H200 the backstop killed PyTorch at its
//! cap (NVML 8.51 GiB > 8 GiB + 512 MiB) and flagged honest 30/70 tenants for "ran kernels
//! without the lease"; these trials are the simulator's version of both. Both actions are set
//! to `kill`, so any judgement against an honest tenant ends it and fails the trial.

use gpuslice_reliability::node::{profile_dir, NodeConfig};
use gpuslice_reliability::{field, Node, Tenant};
use std::time::Duration;

/// One 8 GiB device whose contexts and modules cost what the H200's did.
const REAL_COSTS: &str = "name=Trial GPU 8G,mem=8Gi,sms=16,cc=9.0,ctx=518Mi,module=64Mi";

/// A node with real costs, the arbiter's admission and backstop at their defaults except that
/// both actions kill.
fn real_node(tag: &str) -> Node {
    Node::start_with(
        tag,
        NodeConfig {
            devices: REAL_COSTS.into(),
            ctx_overhead: "518Mi".into(),
            admission: "[backstop]\nmemory_action = \"kill\"\nlease_action = \"kill\"\n".into(),
        },
    )
    .expect("node")
}

/// Waits for every tenant's `kernels=` line and asserts no backstop line in the arbiter's log.
fn assert_all_ran_unjudged(n: &Node, ts: &mut [(String, Tenant)]) {
    for (id, t) in ts.iter_mut() {
        let line = t
            .expect("kernels=", Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("tenant {id}: {e}; arbiter log:\n{}", n.log()));
        assert!(
            field::<u64>(&line, "kernels").unwrap_or(0) > 0,
            "{id}: {line}"
        );
    }
    let log = n.log();
    let judged: Vec<_> = log.lines().filter(|l| l.contains("backstop:")).collect();
    assert!(
        judged.is_empty(),
        "the backstop judged honest tenants:\n{}",
        judged.join("\n")
    );
}

/// A process holding exactly its cap while it runs kernels: its context (518 MiB) and its
/// module (64 MiB) are the driver's, not a bypass. On b667c01's code NVML's 1 606 MiB for a
/// 1 GiB cap exceeded cap + 512 MiB and the process was SIGKILLed.
#[test]
fn an_honest_process_at_its_cap_is_never_killed() {
    let n = real_node("atcap");
    let w = profile_dir().join("gpuslice-workload");
    let args = ["--via", "dlsym", "--hold", "1Gi", "saturate"];
    let args = [&args[..], &["--kernel-us", "1000", "--seconds", "4"]].concat();
    let mut ts = vec![(
        "a".to_string(),
        n.spawn_owner("a", "\"memory\":\"1Gi\"", &w, &args),
    )];
    ts[0].1.send("go").expect("start the tenant");
    // The backstop learns the process's own footprint while it holds its cap: NVML's figure
    // less the 1 GiB the interposer counted is its context (518 MiB) and module (64 MiB).
    let mut last = serde_json::Value::Null;
    let learned = gpuslice_reliability::node::wait_until(Duration::from_secs(60), || {
        last = n.status()["processes"].clone();
        last[0]["footprint"].as_u64() == Some(582 << 20)
    });
    assert!(learned.is_some(), "footprints in the status reply: {last}");
    assert_eq!(last[0]["counted"].as_u64(), Some(1 << 30), "{last}");
    assert_all_ran_unjudged(&n, &mut ts);
}

/// Three honest gated tenants sharing the device 20/30/50 for 10 s, as the real kit's share run
/// did. NVML credits each 200 ms window to one of them with the whole device's busy percent; on
/// b667c01's code a tenant credited with a few windows in a row was judged to have run beyond
/// its lease (12 times in 45 s on the H200).
#[test]
fn honest_shared_tenants_are_never_flagged() {
    let n = real_node("shared");
    let w = profile_dir().join("gpuslice-workload");
    let mut ts: Vec<(String, Tenant)> = Vec::new();
    for (id, compute) in [("a", 20), ("b", 30), ("c", 50)] {
        let request = format!("\"memory\":\"1Gi\",\"compute\":{compute}");
        let args = ["--via", "dlsym", "saturate", "--kernel-us", "1000"];
        let args = [&args[..], &["--depth", "2", "--seconds", "10"]].concat();
        ts.push((id.to_string(), n.spawn_owner(id, &request, &w, &args)));
    }
    for (_, t) in ts.iter_mut() {
        t.send("go").expect("start the tenant");
    }
    assert_all_ran_unjudged(&n, &mut ts);
}

/// The arbiter's probe context found the simulated device's 518 MiB, and the status reply and
/// `gpuslice status --json` say so, with the charge that follows: 518 MiB + the 256 MiB module
/// allowance. Admission commits the cap plus that charge.
#[test]
fn the_measured_context_is_reported_and_charged() {
    const MI: u64 = 1 << 20;
    let n = real_node("footprint");
    let w = profile_dir().join("gpuslice-workload");
    let mut t = n.spawn_owner("a", "\"memory\":\"1Gi\"", &w, &["info"]);
    let st = n.status();
    let ctx = &st["devices"][0]["context"];
    assert_eq!(ctx["footprint"].as_u64(), Some(518 * MI), "{st}");
    assert_eq!(ctx["source"].as_str(), Some("measured"), "{st}");
    assert_eq!(ctx["charge"].as_u64(), Some(774 * MI), "{st}");
    let committed = st["devices"][0]["memory_committed"].as_u64();
    assert_eq!(committed, Some(1024 * MI + 774 * MI), "{st}");
    let cli = n.cli_status().expect("gpuslice status --json");
    assert_eq!(cli["devices"][0]["context"], *ctx, "{cli}");
    t.close_stdin();
    let _ = t.finish(Duration::from_secs(30));
}

/// Six processes of one 2 GiB slice, each a context and 256 MiB (the kit's run on the H200,
/// where five contexts of 518 MiB were charged 512 MiB each and the backstop killed one): with
/// contexts charged what they cost, those that do not fit are refused when they are made
/// (`CUDA_ERROR_OUT_OF_MEMORY`), and nothing is killed later.
#[test]
fn contexts_that_do_not_fit_are_refused_not_killed() {
    let n = real_node("six");
    let w = profile_dir().join("gpuslice-workload");
    let out = n.dir.join("six");
    std::fs::create_dir_all(&out).expect("output dir");
    let script = format!(
        "for i in 1 2 3 4 5 6; do \"{w}\" --via dlsym --hold 256Mi saturate --kernel-us 1000 \
         --seconds 3 >{o}/$i 2>&1 & done; wait; \
         echo kernels=1 ok=$(grep -l kernels= {o}/* | wc -l) oom=$(grep -l OUT_OF_MEMORY {o}/* | wc -l)",
        w = w.display(),
        o = out.display()
    );
    let sh = std::path::Path::new("/bin/sh");
    let mut t = n.spawn_owner("six", "\"memory\":\"2Gi\"", sh, &["-c", &script]);
    t.send("go").expect("start");
    let line = t
        .expect("kernels=", Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", n.log()));
    println!("six processes in one 2 GiB slice: {line}");
    let (ok, oom) = (field::<u32>(&line, "ok"), field::<u32>(&line, "oom"));
    // 2 GiB + one charge of 774 MiB: three contexts (the third's allocation may be refused).
    assert!(matches!(ok, Some(1..=3)), "{line}");
    assert_eq!(ok.zip(oom).map(|(a, b)| a + b), Some(6), "{line}");
    let log = n.log();
    let judged: Vec<_> = log.lines().filter(|l| l.contains("backstop:")).collect();
    assert!(judged.is_empty(), "{}", judged.join("\n"));
}

/// A node with two kinds of GPU whose contexts cost differently (518 MiB and 300 MiB): each
/// device is charged its own footprint plus the module allowance (774 MiB and 556 MiB), in the
/// status reply, in admission's commitment, and in what the interposer charges a process there;
/// an honest process at its cap on the smaller device is not judged, and its own footprint is
/// that device's context and module (300 + 64 MiB).
#[test]
fn each_device_is_charged_its_own_context() {
    const MI: u64 = 1 << 20;
    let mixed =
        format!("{REAL_COSTS};name=Small GPU 4G,mem=4Gi,sms=8,cc=8.0,ctx=300Mi,module=64Mi");
    let n = Node::start_with(
        "mixed",
        NodeConfig {
            devices: mixed,
            ctx_overhead: "518Mi".into(),
            admission: "[backstop]\nmemory_action = \"kill\"\nlease_action = \"kill\"\n".into(),
        },
    )
    .expect("node");
    // The runtime shows a container only its slice's devices; here, the environment does.
    let w = profile_dir().join("gpuslice-workload");
    let w = w.to_str().expect("path");
    let args = [
        "CUDA_VISIBLE_DEVICES=1",
        w,
        "--via",
        "dlsym",
        "--hold",
        "1Gi",
        "saturate",
    ];
    let args = [&args[..], &["--kernel-us", "1000", "--seconds", "4"]].concat();
    let request = "\"memory\":\"1Gi\",\"devices\":{\"list\":[{\"index\":1}]}";
    let env = std::path::Path::new("/usr/bin/env");
    let mut ts = vec![(
        "small".to_string(),
        n.spawn_owner("small", request, env, &args),
    )];
    let st = n.status();
    let charges: Vec<(Option<u64>, Option<u64>)> = (0..2)
        .map(|d| {
            let c = &st["devices"][d]["context"];
            (c["footprint"].as_u64(), c["charge"].as_u64())
        })
        .collect();
    assert_eq!(
        charges,
        [
            (Some(518 * MI), Some(774 * MI)),
            (Some(300 * MI), Some(556 * MI))
        ],
        "{st}"
    );
    let committed = st["devices"][1]["memory_committed"].as_u64();
    assert_eq!(committed, Some(1024 * MI + 556 * MI), "{st}");
    ts[0].1.send("go").expect("start the tenant");
    let mut last = serde_json::Value::Null;
    let learned = gpuslice_reliability::node::wait_until(Duration::from_secs(60), || {
        last = n.status()["processes"].clone();
        last[0]["footprint"].as_u64() == Some(364 * MI)
    });
    assert!(learned.is_some(), "footprints in the status reply: {last}");
    assert_eq!(last[0]["device"].as_u64(), Some(1), "{last}");
    // The interposer charged this device's 556 MiB for the context beside the 1 GiB.
    assert_eq!(n.slice_total_raw("small"), 1024 * MI + 556 * MI);
    assert_all_ran_unjudged(&n, &mut ts);
}
