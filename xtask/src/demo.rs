//! `cargo xtask demo`: the main story, on the simulated GPU when no NVIDIA driver is present.
//!
//! It builds what it runs (a partial dist tree, `target/demo-dist/`), starts `gpuslice-arbiter` on
//! a simulated node (an H100-class and an A100-class device), runs three tenants on GPU 0 with
//! `gpuslice run` — different memory caps (each tenant holds most of its own), guarantees, a
//! ceiling and a high-priority inference loop — prints a live table (each tenant's device time
//! over the last second from the simulator's own clock, what the scheduler charged it from
//! `gpuslice status --json`, the memory its processes hold), resizes one tenant live, lets one
//! finish so its time flows to the others, shows a fourth tenant stopped at its memory cap, and
//! ends with a summary: per tenant and phase, what it was promised (guarantee, ceiling, memory
//! cap) and what it got, and whether each promise held ([`summarize`], [`judge`]).

use crate::dist;
use anyhow::{bail, Context, Result};
use gpuslice_sim_core::Node as SimState;
use gpuslice_test_support::{Arbiter, NodeConfig, SimNode};
use nvml_wrapper::Nvml;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The demo's node: an H100-class and an A100-class device.
pub const DEMO_DEVICES: &str = "name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0;\
name=NVIDIA A100-SXM4-40GB,mem=40Gi,sms=108,cc=8.0";

/// What the demo runs, as paths of the dist tree: the arbiter, the CLI (`gpuslice run` preloads
/// the interposer from `../lib/gpuslice`), the simulated driver libraries and the workload.
const RUNS: [&str; 6] = [
    "usr/bin/gpuslice-arbiter",
    "usr/bin/gpuslice",
    "usr/lib/gpuslice/libgpuslice.so",
    "sim/libcuda.so.1",
    "sim/libnvidia-ml.so.1",
    "sim/bin/gpuslice-workload",
];

/// Only those are built, with the `demo` profile (release semantics, less optimisation: see the
/// workspace Cargo.toml), into `target/demo-dist/`, so a fresh clone reaches the demo quickly;
/// `target/dist/` stays the release tree of `cargo xtask dist`.
fn build() -> Result<PathBuf> {
    dist::build_part("demo", "demo-dist", &RUNS, dist::Link::Host)
}

/// Whether a real NVIDIA driver is present on this machine.
fn real_driver_present() -> bool {
    Path::new("/proc/driver/nvidia/version").exists()
}

pub fn run(force_sim: bool) -> Result<()> {
    if real_driver_present() && !force_sim {
        println!(
            "An NVIDIA driver is present: the workloads here use the simulator's `spin` kernel,"
        );
        println!(
            "so on real hardware use tests/gpu/ (tests/gpu/README.md). Showing the real devices:"
        );
        let nvml = Nvml::init().context("initialising the real NVML")?;
        for i in 0..nvml.device_count()? {
            let d = nvml.device_by_index(i)?;
            let m = d.memory_info()?;
            println!(
                "  GPU {i}: {} total {} MiB used {} MiB",
                d.name()?,
                m.total >> 20,
                m.used >> 20
            );
        }
        println!("Run `cargo xtask demo --sim` for the simulated story.");
        return Ok(());
    }
    let dist = build()?;
    let node = SimNode::new("demo", &NodeConfig::dist(&dist, DEMO_DEVICES));
    println!("gpuslice demo on the SIMULATED GPU (no NVIDIA driver here)");
    println!("node: {}", DEMO_DEVICES.replace(';', " | "));
    let mut arbiter = node.new_arbiter("gpuslice", "[metrics]\nenabled = false\n")?;
    arbiter.env("RUST_LOG", "warn").start()?;
    let sim = node.open_sim()?;
    println!(
        "arbiter: {} (state {})",
        arbiter.socket().display(),
        arbiter.state_dir.display()
    );
    let gpuslice = || cli(&node, &arbiter);

    let tenants = tenants();
    println!("\nThree tenants, each started with `gpuslice run`:");
    for t in &tenants {
        println!("  {:<10} {:<50} {}", t.name, t.opts.join(" "), t.about);
    }
    println!(
        "At {RESIZE_AT} s the trainer is resized live to --compute {RESIZED_TO}; at {BATCH_ENDS} s \
         the batch job ends and its"
    );
    println!("time flows to the others.\n");
    let mut children: Vec<Child> = Vec::new();
    for t in &tenants {
        let child = gpuslice()
            .arg("run")
            .args(&t.opts)
            .arg("--")
            .arg(dist.join("sim/bin/gpuslice-workload"))
            .args(["--via", "dlsym", "--hold", &format!("{}Gi", t.hold_gib)])
            .args(&t.work)
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting tenant {}", t.name))?;
        children.push(child);
    }
    let prefixes: Vec<String> = children
        .iter()
        .map(|c| format!("run-{}-", c.id()))
        .collect();
    println!(
        "got: its device time (the simulator's own clock) over the last second; charged: what \
         the scheduler"
    );
    println!("counted for it (`gpuslice status`, achieved 1 s); mem: what its processes hold.");
    let mut head = format!("{:>5} ", "t(s)");
    for t in &tenants {
        head += &format!(" {:>26}", t.column);
    }
    println!("{head}");
    let mut sub = format!("{:>5} ", "");
    for _ in &tenants {
        sub += &format!(" {:>26}", "got  charged      mem");
    }
    println!("{sub}");
    let mut ticks: Vec<Vec<Tick>> = vec![Vec::new(); tenants.len()];
    let start = Instant::now();
    let mut resized = false;
    let end = Duration::from_secs_f64(RUN_S + 0.5);
    let mut k = 0u32;
    while start.elapsed() < end {
        k += 1;
        let due = Duration::from_millis(500) * k;
        if let Some(d) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(d);
        }
        let status = status(&node, &arbiter)?;
        let t = start.elapsed().as_secs_f64();
        for (i, prefix) in prefixes.iter().enumerate() {
            ticks[i].push(tick(&status, prefix, t, &sim));
        }
        if k.is_multiple_of(2) {
            let mut line = format!("{t:>5.1} ");
            for tt in &ticks {
                line += &format!(" {:>26}", cell(tt));
            }
            println!("{line}");
        }
        if !resized && t >= RESIZE_AT {
            resized = true;
            if let Some(id) = slice_of(&status, &prefixes[0]) {
                let out = gpuslice()
                    .args(["update", &id, "--compute", &RESIZED_TO.to_string()])
                    .output()?;
                println!(
                    "       live resize: gpuslice update {id} --compute {RESIZED_TO} -> {}",
                    if out.status.success() {
                        "applied"
                    } else {
                        "refused"
                    }
                );
            }
        }
    }
    println!("\nwhat each tenant counted itself:");
    let mut own = Vec::new();
    for (t, child) in tenants.iter().zip(children) {
        let out = child.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() {
            bail!("tenant {} failed ({}): {text}", t.name, out.status);
        }
        println!("  {:<10} {text}", t.name);
        own.push(text);
    }

    println!("\nA fourth tenant asks for 2 GiB on the 40 GiB GPU and allocates 512 MiB blocks:");
    let out = gpuslice()
        .args(["run", "--memory", "2Gi", "--model", "A100", "--"])
        .arg(dist.join("sim/bin/gpuslice-workload"))
        .args(["--via", "dlsym", "fill", "--chunk", "512Mi"])
        .output()
        .context("running the fill tenant")?;
    let fill = String::from_utf8_lossy(&out.stdout).trim().to_string();
    println!("  {fill}");
    if !out.status.success() {
        bail!(
            "fill tenant failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let fill_bytes = field(&fill, "bytes").unwrap_or(0.0) as u64;

    println!("\nsummary: what each tenant was promised and what it got.");
    println!(
        "  got: its device time over the phase, from {SETTLE} s after the phase began to its \
         end (the simulator's"
    );
    println!(
        "  clock); charged: the scheduler's mean 1 s share. A guarantee is owed up to what the \
         tenant asks"
    );
    println!("  for and holds within {TOLERANCE} points; a ceiling binds within as much.");
    let rows = summarize(&tenants, &ticks);
    for line in render(&rows) {
        println!("  {line}");
    }
    println!(
        "  fill       capped at 2 GiB: allocated {} MiB, then CUDA_ERROR_OUT_OF_MEMORY ({})",
        fill_bytes >> 20,
        if fill_bytes == 2 << 30 {
            "held exactly"
        } else {
            "NOT at its cap"
        }
    );
    for note in notes(&tenants, &rows) {
        println!("{note}");
    }
    let missed = rows.iter().filter(|r| !r.verdict.holds()).count();
    println!(
        "{}",
        if missed == 0 {
            "every promise above held.".to_string()
        } else {
            format!(
                "{missed} promise(s) above missed; `cargo xtask bench share` measures the \
                 scheduler's misses (docs/benchmarks.md)."
            )
        }
    );
    Ok(())
}

/// When the trainer is resized, to what, when the batch job ends, how long the demo runs (s).
const RESIZE_AT: f64 = 5.0;
const RESIZED_TO: u8 = 40;
const BATCH_ENDS: f64 = 10.0;
const RUN_S: f64 = 16.0;
/// Points a measured share may fall short of its promise and still count as held.
const TOLERANCE: f64 = 2.0;
/// Seconds after a phase starts before its share is measured (the hand-over itself).
const SETTLE: f64 = 1.0;

/// A phase of the story: from, to (s), what changed at its start.
const PHASES: [(f64, f64, &str); 3] = [
    (0.0, RESIZE_AT, "start"),
    (RESIZE_AT, BATCH_ENDS, "trainer resized"),
    (BATCH_ENDS, RUN_S, "batch ended"),
];

/// What a tenant is promised in one phase (its slice's guarantee and ceiling, percent).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Promise {
    guarantee: Option<f64>,
    ceiling: f64,
}

/// One tenant of the demo.
struct DemoTenant {
    name: &'static str,
    /// Its column's header.
    column: &'static str,
    /// `gpuslice run` options.
    opts: Vec<String>,
    /// What it runs, in words.
    about: &'static str,
    /// `gpuslice-workload` subcommand and arguments.
    work: Vec<String>,
    /// Memory cap and what it holds of it, GiB.
    cap_gib: u64,
    hold_gib: u64,
    /// What it asks of the device, percent (`None`: always has work).
    demand: Option<f64>,
    /// Its promise in each of [`PHASES`] (`None`: not running then).
    promises: [Option<Promise>; 3],
}

fn words(a: &str) -> Vec<String> {
    a.split_whitespace().map(String::from).collect()
}

fn tenants() -> Vec<DemoTenant> {
    let p = |g: Option<f64>, c: f64| {
        Some(Promise {
            guarantee: g,
            ceiling: c,
        })
    };
    let (run_s, batch_s) = (RUN_S.to_string(), BATCH_ENDS.to_string());
    vec![
        DemoTenant {
            name: "trainer",
            column: "trainer 30%->40%, 16Gi",
            opts: words("--memory 16Gi --compute 30"),
            about: "1 ms kernels, 8 queued, holds 12 GiB",
            work: words(&format!(
                "saturate --kernel-us 1000 --depth 8 --seconds {run_s}"
            )),
            cap_gib: 16,
            hold_gib: 12,
            demand: None,
            promises: [
                p(Some(30.0), 100.0),
                p(Some(f64::from(RESIZED_TO)), 100.0),
                p(Some(f64::from(RESIZED_TO)), 100.0),
            ],
        },
        DemoTenant {
            name: "batch",
            column: "batch 30% <=60%, 8Gi",
            opts: words("--memory 8Gi --compute 30 --compute-limit 60"),
            about: "1 ms kernels, 8 queued, holds 6 GiB",
            work: words(&format!(
                "saturate --kernel-us 1000 --depth 8 --seconds {batch_s}"
            )),
            cap_gib: 8,
            hold_gib: 6,
            demand: None,
            promises: [p(Some(30.0), 60.0), p(Some(30.0), 60.0), None],
        },
        DemoTenant {
            name: "inference",
            column: "inference 20% high, 4Gi",
            opts: words("--memory 4Gi --compute 20 --priority high"),
            about: "a 1 ms request every 20 ms, holds 3 GiB",
            work: words(&format!(
                "bursty --kernel-us 1000 --rate 50 --seconds {run_s}"
            )),
            cap_gib: 4,
            hold_gib: 3,
            demand: Some(5.0),
            promises: [p(Some(20.0), 100.0); 3],
        },
    ]
}

/// One sample of one tenant.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Tick {
    /// Seconds since the tenants started.
    t: f64,
    /// The scheduler's achieved 1 s share, percent.
    charged: Option<f64>,
    /// Device time of its processes so far, ns (`None`: not running).
    busy_ns: Option<u64>,
    /// Bytes its processes hold.
    mem: Option<u64>,
}

fn tick(status: &serde_json::Value, prefix: &str, t: f64, sim: &SimState) -> Tick {
    let Some((dev, row)) = slice_row(status, prefix) else {
        return Tick {
            t,
            ..Tick::default()
        };
    };
    let pids: Vec<u32> = row["processes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_u64())
                .map(|p| p as u32)
                .collect()
        })
        .unwrap_or_default();
    Tick {
        t,
        charged: row["achieved_1s"].as_f64(),
        busy_ns: (!pids.is_empty())
            .then(|| pids.iter().map(|&p| sim.process_busy_ns(dev, p)).sum()),
        mem: row["memory_used"].as_u64(),
    }
}

/// Device share (percent) between the first tick at or after `from` and the last at or before
/// `to` where the tenant ran at both; `None` when they are less than half a second apart.
fn share_between(ticks: &[Tick], from: f64, to: f64) -> Option<f64> {
    let inside: Vec<&Tick> = ticks
        .iter()
        .filter(|k| k.t >= from && k.t <= to && k.busy_ns.is_some())
        .collect();
    let (a, b) = (inside.first()?, inside.last()?);
    let span = b.t - a.t;
    if span < 0.5 {
        return None;
    }
    let busy = b.busy_ns?.saturating_sub(a.busy_ns?) as f64 / 1e9;
    Some(100.0 * busy / span)
}

/// Mean of the scheduler's 1 s shares over the same window.
fn charged_between(ticks: &[Tick], from: f64, to: f64) -> Option<f64> {
    let v: Vec<f64> = ticks
        .iter()
        .filter(|k| k.t >= from + 1.0 && k.t <= to)
        .filter_map(|k| k.charged)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Whether a promise held.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verdict {
    Held,
    /// Fell short of what it was owed by this many points.
    Short(f64),
    /// Went over its ceiling by this many points.
    Over(f64),
    /// Not enough samples to tell.
    Unmeasured,
}

impl Verdict {
    fn holds(self) -> bool {
        self == Verdict::Held
    }
}

/// What a tenant is owed: its guarantee, but never more than it asks for (a tenant whose
/// requests need 5 % of the device is owed 5 %, whatever its guarantee); a best-effort tenant
/// is owed nothing.
fn owed(p: &Promise, demand: Option<f64>) -> f64 {
    p.guarantee
        .unwrap_or(0.0)
        .min(demand.unwrap_or(f64::INFINITY))
}

fn judge(p: &Promise, demand: Option<f64>, got: Option<f64>) -> Verdict {
    let Some(got) = got else {
        return Verdict::Unmeasured;
    };
    let owed = owed(p, demand);
    if got < owed - TOLERANCE {
        Verdict::Short(owed - got)
    } else if got > p.ceiling + TOLERANCE {
        Verdict::Over(got - p.ceiling)
    } else {
        Verdict::Held
    }
}

/// One line of the summary: a tenant in a phase.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    tenant: &'static str,
    phase: &'static str,
    window: (f64, f64),
    promise: Promise,
    demand: Option<f64>,
    got: Option<f64>,
    charged: Option<f64>,
    verdict: Verdict,
    /// Most it held (bytes), and its cap (GiB).
    held: u64,
    cap_gib: u64,
}

fn summarize(tenants: &[DemoTenant], ticks: &[Vec<Tick>]) -> Vec<Row> {
    let mut rows = Vec::new();
    for (t, tt) in tenants.iter().zip(ticks) {
        let held = tt.iter().filter_map(|k| k.mem).max().unwrap_or(0);
        for ((from, to, phase), promise) in PHASES.iter().zip(t.promises) {
            let Some(promise) = promise else { continue };
            let window = (from + SETTLE, *to);
            let got = share_between(tt, window.0, window.1);
            rows.push(Row {
                tenant: t.name,
                phase,
                window,
                promise,
                demand: t.demand,
                got,
                charged: charged_between(tt, *from, *to),
                verdict: judge(&promise, t.demand, got),
                held,
                cap_gib: t.cap_gib,
            });
        }
    }
    rows
}

fn pct(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.1}%"))
}

fn render(rows: &[Row]) -> Vec<String> {
    let mut out = vec![format!(
        "{:<10} {:<16} {:<9} {:<28} {:>6} {:>8}  {:<18} {}",
        "tenant", "phase", "window", "promised", "got", "charged", "memory held / cap", "verdict"
    )];
    let mut last = "";
    for r in rows {
        let mut promised = match r.promise.guarantee {
            Some(g) => format!("{g:.0}% guaranteed"),
            None => "best effort".into(),
        };
        if r.promise.ceiling < 100.0 {
            promised += &format!(", <={:.0}%", r.promise.ceiling);
        }
        if let Some(d) = r.demand {
            promised += &format!(" (asks {d:.0}%)");
        }
        let mem = if r.tenant == last {
            String::new()
        } else {
            format!(
                "{:.1} GiB / {} GiB",
                r.held as f64 / (1u64 << 30) as f64,
                r.cap_gib
            )
        };
        let verdict = match r.verdict {
            Verdict::Held => "held".to_string(),
            Verdict::Short(by) => format!("MISSED by {by:.1} points"),
            Verdict::Over(by) => format!("OVER its ceiling by {by:.1} points"),
            Verdict::Unmeasured => "not measured".to_string(),
        };
        out.push(format!(
            "{:<10} {:<16} {:<9} {:<28} {:>6} {:>8}  {:<18} {}",
            if r.tenant == last { "" } else { r.tenant },
            r.phase,
            format!("{:.0}-{:.0} s", r.window.0, r.window.1),
            promised,
            pct(r.got),
            pct(r.charged),
            mem,
            verdict
        ));
        last = r.tenant;
    }
    out
}

/// Where the scheduler charged a tenant much more than the device time it got.
fn notes(tenants: &[DemoTenant], rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    for t in tenants {
        let over: Vec<&Row> = rows
            .iter()
            .filter(|r| r.tenant == t.name)
            .filter(|r| matches!((r.got, r.charged), (Some(g), Some(c)) if c > g + 5.0))
            .collect();
        if let (Some(first), true) = (over.first(), !over.is_empty()) {
            out.push(format!(
                "note: the scheduler charged {} {} for {} of device time: it charges the time a \
                 lease is held,",
                t.name,
                pct(first.charged),
                pct(first.got)
            ));
            out.push(
                "      host round trips and drains included, while nobody else runs \
                 (docs/scheduling.md)."
                    .into(),
            );
        }
    }
    out
}

/// `key=value` of a tenant's output.
fn field(text: &str, key: &str) -> Option<f64> {
    let prefix = format!("{key}=");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
}

/// The `gpuslice` CLI of the node's tree, pointed at `arbiter` and the simulated node.
fn cli(node: &SimNode, arbiter: &Arbiter) -> Command {
    let mut c = node.command(node.build().cli());
    c.envs(arbiter.client_env());
    c
}

/// `gpuslice status --json`.
fn status(node: &SimNode, arbiter: &Arbiter) -> Result<serde_json::Value> {
    let out = cli(node, arbiter).args(["status", "--json"]).output()?;
    if !out.status.success() {
        bail!(
            "gpuslice status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The device index and status row of the slice whose id starts with `prefix` (`run-<pid>-`).
fn slice_row<'a>(
    status: &'a serde_json::Value,
    prefix: &str,
) -> Option<(u32, &'a serde_json::Value)> {
    status["devices"].as_array()?.iter().find_map(|d| {
        let row = d["slices"].as_array()?.iter().find(|s| {
            s["slice_id"]
                .as_str()
                .is_some_and(|id| id.starts_with(prefix))
        })?;
        Some((d["index"].as_u64()? as u32, row))
    })
}

fn slice_of(status: &serde_json::Value, prefix: &str) -> Option<String> {
    Some(
        slice_row(status, prefix)?.1["slice_id"]
            .as_str()?
            .to_string(),
    )
}

/// "got% charged% mem" of a tenant's last second, or "-" when it is not running.
fn cell(ticks: &[Tick]) -> String {
    let Some(last) = ticks.last() else {
        return "-".into();
    };
    if last.busy_ns.is_none() {
        return "-".into();
    }
    let got = share_between(ticks, last.t - 1.2, last.t);
    let mem = last.mem.map_or("n/a".into(), |b| {
        format!("{:.1}G", b as f64 / (1u64 << 30) as f64)
    });
    format!("{:>6} {:>6} {:>8}", pct(got), pct(last.charged), mem)
}

/// The issue-2 acceptance checks, run from a dist tree through each way of reaching the driver.
pub fn acceptance(dist: &Path) -> Result<()> {
    let node = SimNode::new(
        "acceptance",
        &NodeConfig::dist(dist, "name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0"),
    );
    for via in ["procaddr", "dlsym"] {
        println!("acceptance checks through --via {via}:");
        let status = node
            .workload()
            .args(["--via", via, "check"])
            .status()
            .context("running the acceptance client")?;
        if !status.success() {
            bail!("acceptance checks through {via} failed");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ticks every 0.5 s from `from` to `to` of a tenant getting `share` percent of the device.
    fn ticks(from: f64, to: f64, share: f64) -> Vec<Tick> {
        let mut out = Vec::new();
        let mut t = from;
        while t <= to + 1e-9 {
            out.push(Tick {
                t,
                charged: Some(share),
                busy_ns: Some(((t - from) * share / 100.0 * 1e9) as u64),
                mem: Some(1 << 30),
            });
            t += 0.5;
        }
        out
    }

    fn promise(g: Option<f64>, c: f64) -> Promise {
        Promise {
            guarantee: g,
            ceiling: c,
        }
    }

    #[test]
    fn share_is_device_time_over_wall_time_inside_the_window() {
        let mut tt = ticks(0.5, 4.0, 40.0);
        // After 4 s it stops; a later tick without busy time does not count.
        tt.push(Tick {
            t: 4.5,
            ..Tick::default()
        });
        let got = share_between(&tt, 1.0, 5.0).unwrap();
        assert!((got - 40.0).abs() < 0.01, "{got}");
        // Less than half a second of samples: no figure rather than a noisy one.
        assert_eq!(share_between(&tt, 3.8, 4.2), None);
        assert_eq!(share_between(&[], 0.0, 10.0), None);
    }

    #[test]
    fn a_guarantee_is_owed_up_to_the_demand_and_a_ceiling_binds() {
        let p = promise(Some(50.0), 60.0);
        assert_eq!(judge(&p, None, Some(49.0)), Verdict::Held);
        assert_eq!(judge(&p, None, Some(31.5)), Verdict::Short(18.5));
        assert_eq!(judge(&p, None, Some(63.0)), Verdict::Over(3.0));
        assert_eq!(judge(&p, None, None), Verdict::Unmeasured);
        // A tenant asking for 5 % is owed 5 %, not its 20 % guarantee.
        let p = promise(Some(20.0), 100.0);
        assert_eq!(judge(&p, Some(5.0), Some(5.0)), Verdict::Held);
        assert_eq!(judge(&p, Some(5.0), Some(2.5)), Verdict::Short(2.5));
        // Best effort is owed nothing.
        assert_eq!(judge(&promise(None, 100.0), None, Some(0.0)), Verdict::Held);
    }

    #[test]
    fn the_summary_judges_each_phase_a_tenant_ran_in() {
        let ts = tenants();
        // trainer above its guarantees, batch at 31.5 % in phase 1 (owed 30: held) and
        // 25 % in phase 2 (MISSED), inference served.
        let mut trainer = ticks(0.5, RESIZE_AT, 60.0);
        trainer.extend(
            ticks(RESIZE_AT + 0.5, RUN_S, 60.0)
                .into_iter()
                .map(|mut k| {
                    k.busy_ns = k.busy_ns.map(|b| b + (RESIZE_AT * 0.6e9) as u64);
                    k
                }),
        );
        let mut batch = ticks(0.5, RESIZE_AT, 31.5);
        let base = (RESIZE_AT - 0.5) * 0.315e9;
        batch.extend(
            ticks(RESIZE_AT, BATCH_ENDS - 0.5, 25.0)
                .into_iter()
                .map(|mut k| {
                    k.busy_ns = k.busy_ns.map(|b| b + base as u64);
                    k
                }),
        );
        let inference = ticks(0.5, RUN_S, 5.0);
        let rows = summarize(&ts, &[trainer, batch, inference]);
        // 3 phases of the trainer, 2 of the batch job, 3 of the inference loop.
        assert_eq!(rows.len(), 8, "{rows:#?}");
        let batch: Vec<&Row> = rows.iter().filter(|r| r.tenant == "batch").collect();
        assert_eq!(batch[0].verdict, Verdict::Held, "{:?}", batch[0]);
        assert!(
            matches!(batch[1].verdict, Verdict::Short(by) if (by - 5.0).abs() < 0.1),
            "{:?}",
            batch[1]
        );
        assert!(rows
            .iter()
            .filter(|r| r.tenant != "batch")
            .all(|r| r.verdict.holds()));
        let text = render(&rows).join("\n");
        assert!(text.contains("MISSED by 5.0 points"), "{text}");
        assert!(text.contains("1.0 GiB / 8 GiB"), "{text}");
        // Charged as much as it got: no note about the scheduler's charge.
        assert!(notes(&ts, &rows).is_empty());
    }

    #[test]
    fn a_charge_far_above_the_device_time_is_noted() {
        let ts = tenants();
        let mut inference = ticks(0.5, RUN_S, 5.0);
        for k in inference.iter_mut() {
            k.charged = Some(26.0);
        }
        let rows = summarize(&ts, &[Vec::new(), Vec::new(), inference]);
        let notes = notes(&ts, &rows);
        assert!(
            notes[0].contains("charged inference 26.0% for 5.0%"),
            "{notes:?}"
        );
    }
}
