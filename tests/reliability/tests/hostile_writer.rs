//! Trial 1: a tenant writes hostile bytes over its own writable `usage` file while the
//! arbiter and two other tenants run.
//!
//! Slices: `h` (hostile, 512 MiB, best effort), `a` (30 %, 512 MiB), `b` (70 %, 512 MiB). For the
//! whole run (60 s; `GPUSLICE_TRIALS_SCALE` shortens it, at least 10 s):
//! * `h`: a scribbler writes random bytes at random offsets (and now and then over the whole
//!   file) into `h/usage`, while `fill` tenants in `h` allocate through the interposer again and
//!   again; the simulator's ground truth for them must never exceed `h`'s cap;
//! * `a`, `b`: one saturating tenant each (1 ms kernels), and `fill` tenants one after another,
//!   each of which must get exactly the cap and then be refused (the over-cap allocation fails,
//!   the accounting is exact);
//! * the arbiter answers `status` every 200 ms, `gpuslice status --json` every second shows the
//!   right caps for `a` and `b` and no usage above any cap;
//! * at the end `a` and `b` hold exactly 0; `a`'s share of the kernels `a` and `b` ran is printed
//!   and, in the targeted runs below, must be 30 % ± 15 points.
//!
//! Two targeted attacks run for 10 s each: zeros over the totals ("nothing is in use") and
//! truncating the file to a random size for up to 20 ms at a time (readers' mappings past the
//! end would fault). The share check under random bytes is a known failure (ignored test).

use gpuslice_reliability::node::profile_dir;
use gpuslice_reliability::{field, Node, Tenant};
use std::path::Path;
use std::time::{Duration, Instant};

const CAP: u64 = 512 << 20;

struct Filler {
    tenant: Option<Tenant>,
    runs: u64,
    exact: u64,
}

impl Filler {
    fn new() -> Filler {
        Filler {
            tenant: None,
            runs: 0,
            exact: 0,
        }
    }

    /// Starts a `fill` when none runs; judges one that exited. `strict`: must get exactly the cap.
    fn tick(&mut self, n: &Node, dir: &Path, strict: bool, who: &str) {
        if let Some(t) = self.tenant.as_mut() {
            let Some(st) = t.exited().expect("try_wait") else {
                return;
            };
            let line = t
                .output
                .iter()
                .find(|l| l.starts_with("allocations="))
                .cloned()
                .unwrap_or_default();
            let bytes: Option<u64> = field(&line, "bytes");
            if strict {
                assert!(st.success(), "{who}: fill failed: {:?}", t.output);
                assert_eq!(bytes, Some(CAP), "{who}: fill got {line}");
                assert!(line.contains("refusal=CUDA_ERROR_OUT_OF_MEMORY"), "{line}");
            } else if let Some(b) = bytes {
                assert!(b <= CAP, "{who}: fill got {b} bytes through a {CAP} cap");
            }
            if bytes == Some(CAP) {
                self.exact += 1;
            }
            self.runs += 1;
            self.tenant = None;
        }
        let mut c = n.tenant_command(&profile_dir().join("gpuslice-workload"), dir);
        c.args([
            "--via",
            "dlsym",
            "fill",
            "--chunk",
            "64Mi",
            "--hold-ms",
            "50",
        ]);
        self.tenant = Some(Tenant::spawn(c).expect("fill"));
    }
}

/// Runs the trial; `shares`: also require a's share of a + b to stay 0.30 ± 0.15. Returns the
/// kernels `a` and `b` ran.
fn hostile_run(mode: &str, seconds: f64, shares: bool) -> (u64, u64) {
    // Two tests run the "random" mode at once: each run gets its own node directory.
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let n = Node::start(&format!("hostile-{mode}-{run}")).expect("node");
    let h = n.admit("h", "\"memory\":\"512Mi\"");
    let a = n.admit("a", "\"memory\":\"512Mi\",\"compute\":30");
    let b = n.admit("b", "\"memory\":\"512Mi\",\"compute\":70");
    let tenant = profile_dir().join("gpuslice-trial-tenant");
    let workload = profile_dir().join("gpuslice-workload");
    let sat = |dir: &Path| {
        let mut c = n.tenant_command(&workload, dir);
        c.args([
            "--via",
            "dlsym",
            "saturate",
            "--kernel-us",
            "1000",
            "--depth",
            "2",
            "--seconds",
            &seconds.to_string(),
        ]);
        Tenant::spawn(c).expect("saturate")
    };
    let mut sat_a = sat(&a);
    let mut sat_b = sat(&b);
    let mut scribbler = {
        let mut c = n.tenant_command(&tenant, &h);
        c.args([
            "scribble",
            "--dir",
            &h.display().to_string(),
            "--seconds",
            &seconds.to_string(),
            "--mode",
            mode,
        ]);
        Tenant::spawn(c).expect("scribbler")
    };
    let (mut fa, mut fb, mut fh) = (Filler::new(), Filler::new(), Filler::new());
    let t0 = Instant::now();
    let (mut statuses, mut cli_checks, mut samples) = (0u64, 0u64, 0u64);
    let mut max_status = Duration::ZERO;
    let mut max_h_truth = 0u64;
    let (mut next_status, mut next_cli) = (Duration::ZERO, Duration::from_millis(500));
    while t0.elapsed().as_secs_f64() < seconds {
        fa.tick(&n, &a, true, "a");
        fb.tick(&n, &b, true, "b");
        fh.tick(&n, &h, false, "h");
        // Ground truth for the hostile slice's allocating process.
        if let Some(pid) = fh.tenant.as_ref().map(Tenant::pid) {
            let truth: u64 = n
                .sim_processes()
                .iter()
                .filter(|(p, _)| *p == pid)
                .map(|(_, b)| b)
                .sum();
            max_h_truth = max_h_truth.max(truth);
            assert!(
                truth <= CAP,
                "hostile slice's tenant {pid} holds {truth} bytes on the device, cap {CAP}"
            );
            samples += 1;
        }
        if t0.elapsed() >= next_status {
            let ts = Instant::now();
            let st = n.status();
            max_status = max_status.max(ts.elapsed());
            assert_eq!(st["slices"].as_array().map(Vec::len), Some(3), "{st}");
            statuses += 1;
            next_status += Duration::from_millis(200);
        }
        if t0.elapsed() >= next_cli {
            let v = n.cli_status().expect("gpuslice status");
            for d in v["devices"].as_array().expect("devices") {
                for s in d["slices"].as_array().expect("slices") {
                    let id = s["slice_id"].as_str().unwrap_or("");
                    assert_eq!(s["memory_cap"].as_u64(), Some(CAP), "{id}: {s}");
                    let used = s["memory_used"].as_u64().unwrap_or(0);
                    assert!(used <= CAP, "status shows {id} using {used} > cap: {s}");
                }
            }
            cli_checks += 1;
            next_cli += Duration::from_secs(1);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let scribbled = scribbler
        .expect("writes=", Duration::from_secs(30))
        .expect("scribbler report");
    let limit = Duration::from_secs(60);
    let ka: u64 = field(&sat_a.expect("kernels=", limit).expect("a"), "kernels").expect("a");
    let kb: u64 = field(&sat_b.expect("kernels=", limit).expect("b"), "kernels").expect("b");
    for f in [&mut fa, &mut fb, &mut fh] {
        if let Some(t) = f.tenant.as_mut() {
            t.finish(limit).expect("last fill exits");
        }
    }
    assert!(fa.runs > 0 && fb.runs > 0, "no fill finished in a or b");
    // a and b hold nothing now; their accounting is exact.
    assert_eq!(n.slice_total_raw("a"), 0);
    assert_eq!(n.slice_total_raw("b"), 0);
    let share = ka as f64 / (ka + kb).max(1) as f64;
    println!(
        "hostile writer ({mode}, {seconds:.0} s): scribbler {scribbled}; arbiter answered \
         {statuses} status requests (max {:.1} ms), {cli_checks} gpuslice status checks; a/b \
         fills {}/{} all exactly the cap then OOM; hostile slice fills {} ({} got the cap), \
         ground truth sampled {samples} times, max {max_h_truth} <= cap {CAP}; kernels a {ka} \
         b {kb}: a's share {share:.3} (guarantee 0.30)",
        max_status.as_secs_f64() * 1e3,
        fa.runs,
        fb.runs,
        fh.runs,
        fh.exact,
    );
    if !shares {
        return (ka, kb);
    }
    assert!(
        (share - 0.30).abs() <= 0.15,
        "a's share {share:.3} (a {ka}, b {kb}) is not about 0.30"
    );
    assert!(
        ka + kb > (seconds * 300.0) as u64,
        "a and b ran only {} kernels",
        ka + kb
    );
    (ka, kb)
}

#[test]
fn hostile_random_bytes_over_usage() {
    hostile_run(
        "random",
        (60.0 * gpuslice_reliability::scale()).max(10.0),
        false,
    );
}

/// Random bytes over the hostile slice's scheduler words (`demand`, `seen`, `pending`, `near`)
/// once made the arbiter grant it leases it never used and lift the neighbours' virtual time to
/// its own (a's share 0.45–0.49, the device about half idle: docs/reliability.md, "Findings").
/// Now a's share of a + b stays within 6 points of 30 % (measured 0.28–0.31 at load 8) and a
/// and b together run at least 60 % of the 1 ms kernels the device could (measured 84–90 %).
#[test]
fn hostile_random_bytes_keep_neighbours_shares() {
    let seconds = 10.0;
    let (ka, kb) = hostile_run("random", seconds, true);
    let share = ka as f64 / (ka + kb).max(1) as f64;
    assert!(
        (share - 0.30).abs() <= 0.06,
        "a's share {share:.3} (a {ka}, b {kb}) is not 0.30 ± 0.06"
    );
    assert!(
        ka + kb >= (seconds * 600.0) as u64,
        "a and b ran {} kernels of {} possible: the hostile slice wastes the device",
        ka + kb,
        (seconds * 1000.0) as u64
    );
}

#[test]
fn hostile_zeroed_totals() {
    hostile_run("zero-totals", 10.0, true);
}

#[test]
fn hostile_truncation_of_usage() {
    hostile_run("truncate", 10.0, true);
}

/// Found the arbiter dying of SIGBUS (fixed: `gpuslice_region::sigbus`). The neighbours'
/// shares still move while the scheduler words come and go (known scheduler bug, see
/// `hostile_random_bytes_keep_neighbours_shares`), so only the rest is asserted.
#[test]
fn hostile_truncation_into_the_device_words() {
    hostile_run("truncate-head", 10.0, false);
}
