//! Memory isolation when a slice forks ("contexts count", docs/interposer.md): four 2 GiB slices on a 16 GiB device
//! whose contexts cost 300 MiB each; one slice forks waves of up to 32 CUDA processes for 60 s,
//! the other three allocate to their caps over and over.
//!
//! * The arbiter charges each process's context (`admission.context_reserve = 300Mi`, the
//!   simulator's real cost) under the slice's promise, cap + reserve (`processes_per_slice = 1`:
//!   2 GiB + 300 MiB). So the forking slice fits at most 7 contexts; the others are refused with
//!   `CUDA_ERROR_OUT_OF_MEMORY` at context creation, and allocations beside them are refused
//!   once contexts plus allocations reach the promise.
//! * Every slice is owned by its own process (`Node::spawn_owner`), so the backstop judges them.
//! * The honest tenants (`rounds`) each run one process: allocate until refused, report, free,
//!   again. Every round must give exactly the cap (the process's own context is within the
//!   slice's reserve: `docs/interposer.md`, "Contexts count").
//! * The forker's children (`hog`) create a context, allocate random chunks up to a random
//!   amount, hold it until the wave ends and exit (half after freeing, half holding) while the
//!   next wave starts; a quarter of each wave is SIGKILLed at random moments 0–40 ms after the
//!   spawns.
//! * A sampler reads the simulator's ground truth (device memory in use by live processes,
//!   contexts included) every 2 ms: never above the sum of promises (the device's
//!   `memory_committed` in the arbiter's `status`); the forking slice's own processes never
//!   above its promise; no backstop action.
//!
//! `GPUSLICE_TRIALS_FORK_SECONDS` shortens the 60 s of the first test (development);
//! `GPUSLICE_TRIALS_SCALE` does not. `GPUSLICE_TRIALS_UNCHARGED=1` is the negative control: the forking slice's `limits` are
//! rewritten to charge no context before it starts (what the interposer did before f8619a0);
//! then the assertions must fail. `GPUSLICE_TRIALS_LINGER_MS=N`: every child lingers N ms in an
//! exit handler that runs after the interposer's (which gives the context's charge back).
//! `GPUSLICE_TRIALS_LEADER_FIRST_MS=N`: every child's main thread exits alone and the process
//! lives on N ms in another thread (the second test does this with 50 ms).

use gpuslice_region::LimitsWriter;
use gpuslice_reliability::node::{profile_dir, usage_dump_at, wait_until, NodeConfig};
use gpuslice_reliability::{field, seed, Node, Tenant};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const CAP: u64 = 2048 * MIB;
const CTX: u64 = 300 * MIB;
const HONEST: [&str; 3] = ["h1", "h2", "h3"];
const FORKING: &str = "fork";

/// What the sampler saw.
#[derive(Default, Debug)]
struct Samples {
    n: u64,
    max_total: u64,
    /// Samples whose total was above the sum of promises.
    over: u64,
    /// Largest sum over processes that are not the honest tenants (the forking slice's), over
    /// consistent snapshots of the per-process figures.
    max_forking: u64,
    /// Samples whose per-process figures kept changing between two reads (not judged per
    /// slice; their device totals are).
    torn: u64,
    /// Largest single honest tenant.
    max_honest: u64,
    /// The first samples above the sum of promises: (total, honest tenants' sum, the others'
    /// sum, their processes), read just after the total.
    first_over: Vec<(u64, u64, u64, usize)>,
    /// At the first sample above the sum of promises: every process the simulator counts
    /// (pid, bytes, `/proc` state and thread count) and the forking slice's `usage` records.
    first_detail: Option<String>,
}

/// What the simulator counts per process, with `/proc`'s view of each, and the forking slice's
/// records: read as soon as a sample is above the promises, to show which process holds memory
/// no record charges.
fn detail(sim: &gpuslice_sim_core::Node, forking_dir: &std::path::Path) -> String {
    let procs: Vec<String> = sim
        .processes(0)
        .iter()
        .map(|p| {
            let st = gpuslice_region::liveness::stat_of(p.pid).ok().flatten();
            format!(
                "{}:{}MiB:{}",
                p.pid,
                p.used_bytes / MIB,
                st.map_or("gone".to_string(), |s| format!(
                    "{}/{}t",
                    char::from(s.state),
                    s.threads
                ))
            )
        })
        .collect();
    format!(
        "simulator processes {}; forking slice {}",
        procs.join(" "),
        usage_dump_at(forking_dir)
    )
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn forking_slice_cannot_take_its_neighbours_memory() {
    let secs: f64 = std::env::var("GPUSLICE_TRIALS_FORK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60.0);
    let linger = env_u64("GPUSLICE_TRIALS_LINGER_MS").unwrap_or(0);
    let leader_first = env_u64("GPUSLICE_TRIALS_LEADER_FIRST_MS").unwrap_or(0);
    trial("fork", secs, linger, leader_first);
}

/// Every child ends with its main thread exiting alone, its process living on for 50 ms in
/// another thread (`hog --leader-first-ms`): `/proc` shows a zombie that still holds its
/// context and memory. Charges given back on that sight let the forking slice hold 4.6 GiB of
/// its 2.3 GiB promise (2 516 of 4 062 samples above the promises); they must stay until the
/// process is gone.
#[test]
fn an_exiting_process_keeps_its_charge_until_it_is_gone() {
    trial("fork-exiting", 10.0, 0, 50);
}

fn trial(tag: &str, secs: f64, linger: u64, leader_first: u64) {
    let uncharged = std::env::var_os("GPUSLICE_TRIALS_UNCHARGED").is_some();
    let seed = seed();
    println!(
        "fork waves: {secs} s, seed {seed}, contexts charged: {}, linger {linger} ms, leader \
         first {leader_first} ms",
        !uncharged
    );
    let n = Node::start_with(
        tag,
        NodeConfig {
            devices: "name=Trial GPU 16G,mem=16Gi,sms=16,cc=9.0".into(),
            ctx_overhead: "300Mi".into(),
            admission:
                "context_reserve = \"300Mi\"\nmodule_allowance = \"0\"\nprocesses_per_slice = 1\n"
                    .into(),
        },
    )
    .expect("node");
    let tenant = profile_dir().join("gpuslice-trial-tenant");
    let request = "\"memory\":\"2Gi\"";
    let mut honest: Vec<Tenant> = HONEST
        .iter()
        .map(|id| n.spawn_owner(id, request, &tenant, &["rounds", "--hold-ms", "2"]))
        .collect();
    let args = format!(
        "forker --seconds {secs} --max-procs 32 --max-mib 2048 --linger-ms {linger} \
         --leader-first-ms {leader_first} --seed {seed}"
    );
    let args: Vec<&str> = args.split(' ').collect();
    let mut forker = n.spawn_owner(FORKING, request, &tenant, &args);
    if uncharged {
        let w = LimitsWriter::open(&n.state.join(FORKING)).expect("limits");
        w.set_context(0, 0, 0).expect("set_context");
    }
    // What admission promised: the device's committed memory, every slice's cap + reserve.
    let st = n.status();
    let promised = st["devices"][0]["memory_committed"]
        .as_u64()
        .expect("committed");
    assert_eq!(promised, 4 * (CAP + CTX), "{st}");
    for t in honest.iter_mut() {
        t.send("go").expect("go");
        t.expect("round=", Duration::from_secs(30))
            .expect("first round");
    }
    let honest_pids: Vec<u32> = honest.iter().map(|t| t.pid()).collect();
    // The sampler: ground truth every 2 ms until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let sim = n.sim_reader().expect("simulator");
        let stop = stop.clone();
        let forking_dir = n.state.join(FORKING);
        std::thread::spawn(move || {
            let mut s = Samples::default();
            while !stop.load(Ordering::Relaxed) {
                let total = sim.mem_used(0);
                // The per-process figures are read one process at a time: a free in one and an
                // allocation in another between the two reads would count the same bytes
                // twice. A snapshot counts only when a second read finds every figure
                // unchanged (the device total above is one word, exact by itself).
                let mut snapshot = None;
                for _ in 0..8 {
                    let a = sim.processes(0);
                    if a == sim.processes(0) {
                        snapshot = Some(a);
                        break;
                    }
                }
                s.n += 1;
                s.max_total = s.max_total.max(total);
                s.over += u64::from(total > promised);
                let Some(procs) = snapshot else {
                    s.torn += 1;
                    continue;
                };
                let (mut forking, mut one_honest, mut honest, mut others) = (0, 0, 0, 0);
                for p in procs {
                    if honest_pids.contains(&p.pid) {
                        one_honest = one_honest.max(p.used_bytes);
                        honest += p.used_bytes;
                    } else {
                        forking += p.used_bytes;
                        others += 1;
                    }
                }
                if total > promised && s.first_over.len() < 10 {
                    s.first_over.push((total, honest, forking, others));
                }
                if total > promised && s.first_detail.is_none() {
                    s.first_detail = Some(detail(&sim, &forking_dir));
                }
                s.max_forking = s.max_forking.max(forking);
                s.max_honest = s.max_honest.max(one_honest);
                std::thread::sleep(Duration::from_millis(2));
            }
            s
        })
    };
    let t0 = Instant::now();
    forker.send("go").expect("go");
    let summary = forker
        .expect("waves=", Duration::from_secs_f64(secs + 120.0))
        .unwrap_or_else(|e| panic!("forker: {e}; arbiter log:\n{}", n.log()));
    let ran = t0.elapsed();
    // Every child is gone: the forking slice's usage drains to exactly 0 while its owner lives
    // (a slice is released when its owner exits).
    let drained = wait_until(Duration::from_secs(10), || n.slice_total_raw(FORKING) == 0);
    assert!(
        drained.is_some(),
        "the forking slice holds {} after its children exited: {}",
        n.slice_total_raw(FORKING),
        n.usage_dump(FORKING)
    );
    forker.send("exit").expect("exit");
    let st = forker
        .finish(Duration::from_secs(20))
        .expect("forker exits");
    assert!(st.success(), "forker failed: {:?}", forker.output);
    // The honest tenants stop; every round of theirs is judged.
    let mut rounds: BTreeMap<&str, (u64, u64, u64, Vec<String>)> = BTreeMap::new();
    for (id, t) in HONEST.iter().zip(honest.iter_mut()) {
        t.send("stop").expect("stop");
        t.expect("done", Duration::from_secs(30))
            .expect("honest done");
        // Everything freed: the slice holds the tenant's context charge alone.
        let left = n.slice_total_raw(id);
        assert_eq!(
            left,
            CTX,
            "{id} holds {left} after freeing: {}",
            n.usage_dump(id)
        );
        t.close_stdin();
        let st = t.finish(Duration::from_secs(20)).expect("honest exits");
        assert!(st.success(), "{id} failed: {:?}", t.output);
        let r = rounds.entry(id).or_insert((0, u64::MAX, 0, Vec::new()));
        for l in t.output.iter().filter(|l| l.starts_with("round=")) {
            let b: u64 = field(l, "bytes").expect("bytes");
            r.0 += 1;
            r.1 = r.1.min(b);
            r.2 = r.2.max(b);
            if b != CAP {
                r.3.push(l.clone());
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let s = sampler.join().expect("sampler");
    let waves: Vec<&String> = forker
        .output
        .iter()
        .filter(|l| l.starts_with("wave="))
        .collect();
    let full = waves
        .iter()
        .filter(|l| field::<u64>(l, "procs") == Some(32))
        .count();
    let most_ctx = waves
        .iter()
        .filter_map(|l| field::<u64>(l, "ctx_ok"))
        .max()
        .unwrap_or(0);
    println!(
        "fork waves: {summary}; {} waves ({full} of 32 processes), at most {most_ctx} contexts \
         in a wave; ran {:.1} s",
        waves.len(),
        ran.as_secs_f64()
    );
    println!(
        "ground truth: {} samples ({} without a consistent per-process snapshot), max {} MiB \
         (forking slice's processes {} MiB, one honest tenant {} MiB), sum of promises {} MiB, \
         {} samples above it{}",
        s.n,
        s.torn,
        s.max_total / MIB,
        s.max_forking / MIB,
        s.max_honest / MIB,
        promised / MIB,
        s.over,
        s.first_detail
            .as_deref()
            .map_or(String::new(), |d| format!("; at the first: {d}"))
    );
    for (id, (k, lo, hi, bad)) in &rounds {
        println!(
            "honest {id}: {k} rounds, achieved {}..{} MiB (cap {} MiB), {} short",
            lo / MIB,
            hi / MIB,
            CAP / MIB,
            bad.len()
        );
    }
    let log = n.log();
    let actions: Vec<_> = log.lines().filter(|l| l.contains("backstop:")).collect();
    println!("backstop actions: {}", actions.len());
    for a in actions.iter().take(5) {
        println!("  {a}");
    }
    // Every honest slice always got its full cap.
    for (id, (k, _, _, bad)) in &rounds {
        assert!(*k >= 2, "{id} ran {k} rounds only");
        assert!(
            bad.is_empty(),
            "{id}: {} of {k} rounds short of the cap {CAP}: {:?}",
            bad.len(),
            &bad[..bad.len().min(10)]
        );
    }
    // Ground truth never above what admission promised, nor the forking slice above its own.
    assert_eq!(
        s.over, 0,
        "ground truth above the sum of promises {promised} in {} of {} samples (max {}); first \
         ones (total, honest, forking slice, its processes): {:?}",
        s.over, s.n, s.max_total, s.first_over
    );
    // The per-slice bounds are judged on consistent snapshots; most samples must be one.
    assert!(
        s.torn * 10 < s.n,
        "{} of {} samples had no consistent per-process snapshot",
        s.torn,
        s.n
    );
    assert!(
        s.max_forking <= CAP + CTX,
        "the forking slice's processes held {} > its promise {}",
        s.max_forking,
        CAP + CTX
    );
    assert!(
        s.max_honest <= CAP + CTX,
        "an honest tenant held {}",
        s.max_honest
    );
    // The trial tested what it means to: full waves ran, contexts were refused, kills happened.
    let total = |k: &str| field::<u64>(&summary, k).unwrap_or(0);
    assert!(full >= 1, "no wave of 32 processes: {summary}");
    assert!(
        total("ctx_refused") > 0,
        "no context was refused: {summary}"
    );
    assert!(total("killed") > 0, "nobody was killed: {summary}");
    assert_eq!(
        total("lost"),
        0,
        "children killed by someone else: {summary}"
    );
    assert!(
        actions.is_empty(),
        "backstop acted:\n{}",
        actions.join("\n")
    );
    // The device is empty once every tenant has exited.
    let drained = wait_until(Duration::from_secs(10), || n.sim_used() == 0);
    assert!(drained.is_some(), "simulator holds {}", n.sim_used());
}
