//! `cargo xtask bench interposer`: the interposer's added cost per driver call, measured side by
//! side in one run. A bench client (`interposer/examples/bench_client.rs`) times each call
//! (`cuLaunchKernel` of `noop`, a `cuMemAlloc_v2` + `cuMemFree_v2` pair, `cuMemGetInfo_v2`; each
//! sample the mean of 16 consecutive calls) in three configurations, alternated over several
//! rounds: without the interposer, with it and no request (pass-through), and with it enforcing
//! a standalone memory cap (`GPUSLICE_MEMORY`; the launch gate is open: no arbiter). Two drivers:
//! a stub `libcuda.so.1` that returns at once (`interposer/examples/stub_cuda.rs`: the difference
//! is the interposer's own cost) and the simulated GPU (end to end, with its own variance). Also
//! the start time of `/bin/true` with and without the preload (a process that never touches
//! CUDA). Medians and p99 over all samples; "added" = with − without. On the stub also the
//! launch gate's states — a slice alone on its device (lease held, no queue bound) and a shared
//! one (the arbiter's queue bound of 8) — with the driver calls each launch makes, counted by
//! the stub (a driver call costs 8 ns to over a µs on a real driver, which a stub's
//! nanoseconds hide). Results go to docs/benchmarks.md.

use crate::shell::{cargo, exec, target_dir};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const ROUNDS: usize = 6;
const SAMPLES: &str = "20000";
const STARTS: usize = 200;

/// Which interposer a configuration preloads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lib {
    None,
    /// This tree's `libgpuslice.so`.
    Current,
    /// The `baseline=<path>` one (an older build), for before/after in the same run.
    Baseline,
}

struct Config {
    name: &'static str,
    preload: Lib,
    envs: &'static [(&'static str, &'static str)],
    /// A slice directory holding its device's lease (`bench_client make-slice`): `alone` (no
    /// queue bound) or `shared` (the arbiter's bound of 8). Stub driver only.
    slice: Option<&'static str>,
}

const CONFIGS: &[Config] = &[
    Config {
        name: "without",
        preload: Lib::None,
        envs: &[],
        slice: None,
    },
    Config {
        name: "with, no request",
        preload: Lib::Current,
        envs: &[],
        slice: None,
    },
    Config {
        name: "with, capped",
        preload: Lib::Current,
        envs: &[("GPUSLICE_MEMORY", "8Gi")],
        slice: None,
    },
    Config {
        name: "with, alone in a slice",
        preload: Lib::Current,
        envs: &[],
        slice: Some("alone"),
    },
    Config {
        name: "with, shared",
        preload: Lib::Current,
        envs: &[],
        slice: Some("shared"),
    },
    Config {
        name: "baseline, no request",
        preload: Lib::Baseline,
        envs: &[],
        slice: None,
    },
    Config {
        name: "baseline, capped",
        preload: Lib::Baseline,
        envs: &[("GPUSLICE_MEMORY", "8Gi")],
        slice: None,
    },
    Config {
        name: "baseline, alone in a slice",
        preload: Lib::Baseline,
        envs: &[],
        slice: Some("alone"),
    },
    Config {
        name: "baseline, shared",
        preload: Lib::Baseline,
        envs: &[],
        slice: Some("shared"),
    },
];

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Setup {
    client: PathBuf,
    preload: PathBuf,
    baseline: Option<PathBuf>,
    /// (driver name, directory holding its libcuda.so.1)
    drivers: Vec<(&'static str, PathBuf)>,
    libs: PathBuf,
    state: PathBuf,
}

fn setup(baseline: Option<PathBuf>) -> Result<Setup> {
    if let Some(b) = &baseline {
        if !b.is_file() {
            bail!(
                "baseline={}: no such file (an older libgpuslice.so)",
                b.display()
            );
        }
    }
    exec(cargo().args([
        "build",
        "--release",
        "-p",
        "gpuslice-sim-cuda",
        "-p",
        "gpuslice-sim-nvml",
        "-p",
        "gpuslice-interposer",
    ]))?;
    exec(cargo().args([
        "build",
        "--release",
        "-p",
        "gpuslice-interposer",
        "--example",
        "bench_client",
        "--example",
        "stub_cuda",
    ]))?;
    let rel = target_dir().join("release");
    let dir =
        std::env::temp_dir().join(format!("gpuslice-bench-interposer-{}", std::process::id()));
    let libs = dir.join("lib");
    std::fs::create_dir_all(&libs)?;
    for (from, to) in [
        ("libcuda.so", "libcuda.so.1"),
        ("libnvidia_ml.so", "libnvidia-ml.so.1"),
    ] {
        let link = libs.join(to);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(rel.join(from), &link)
            .with_context(|| format!("linking {}", link.display()))?;
    }
    let stub = dir.join("stub");
    std::fs::create_dir_all(&stub)?;
    let link = stub.join("libcuda.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(rel.join("examples/libstub_cuda.so"), &link)
        .with_context(|| format!("linking {}", link.display()))?;
    Ok(Setup {
        client: rel.join("examples/bench_client"),
        preload: rel.join("libgpuslice.so"),
        baseline,
        drivers: vec![("stub driver", stub), ("simulated GPU", libs.clone())],
        libs,
        state: dir.join("sim.state"),
    })
}

fn command(s: &Setup, libs: &Path, program: &Path, c: &Config) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("LD_LIBRARY_PATH", libs)
        .env("GPUSLICE_SIM_STATE", &s.state)
        .env("GPUSLICE_SIM_DEVICES", "mem=80Gi")
        .env_remove("LD_PRELOAD")
        .env_remove("GPUSLICE_MEMORY")
        .env_remove("GPUSLICE_SLICE_DIR")
        .env_remove("GPUSLICE_STANDALONE_ID")
        .env_remove("CUDA_DEVICE_MEMORY_LIMIT");
    match (c.preload, &s.baseline) {
        (Lib::Current, _) => {
            cmd.env("LD_PRELOAD", &s.preload);
        }
        (Lib::Baseline, Some(b)) => {
            cmd.env("LD_PRELOAD", b);
        }
        _ => {}
    }
    for (k, v) in c.envs {
        cmd.env(k, v);
    }
    cmd
}

/// config → op → samples (ns)
type Samples = BTreeMap<&'static str, BTreeMap<String, Vec<u64>>>;
/// config → (`thread` or `process`) → the client's `CALLS` line: driver calls per launch.
type Calls = BTreeMap<&'static str, BTreeMap<String, String>>;

/// The slice directory of a configuration's state, written fresh (its lease held).
fn slice_dir(s: &Setup, state: &str) -> Result<PathBuf> {
    let dir = s.libs.with_file_name(format!("slice-{state}"));
    let st = Command::new(&s.client)
        .args(["make-slice"])
        .arg(&dir)
        .arg(state)
        .env_remove("LD_PRELOAD")
        .status()
        .context("bench_client make-slice")?;
    if !st.success() {
        bail!("bench_client make-slice {} {state} failed", dir.display());
    }
    Ok(dir)
}

fn run_client(
    s: &Setup,
    libs: &Path,
    c: &Config,
    all: &mut Samples,
    calls: &mut Calls,
) -> Result<()> {
    let mut cmd = command(s, libs, &s.client, c);
    if let Some(state) = c.slice {
        cmd.env("GPUSLICE_SLICE_DIR", slice_dir(s, state)?);
    }
    let out = cmd
        .arg(SAMPLES)
        .output()
        .context("running the bench client")?;
    if !out.status.success() {
        bail!(
            "bench client ({}) failed: {}",
            c.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut w = line.split_ascii_whitespace();
        let first = w.next();
        if first == Some("CALLS") {
            if let Some(scope) = w.next() {
                let rest: Vec<&str> = w.collect();
                calls
                    .entry(c.name)
                    .or_default()
                    .insert(scope.to_string(), rest.join(" "));
            }
            continue;
        }
        if first != Some("OP") {
            continue;
        }
        let Some(op) = w.next() else { continue };
        let v = all
            .entry(c.name)
            .or_default()
            .entry(op.to_string())
            .or_default();
        v.extend(w.filter_map(|x| x.parse::<u64>().ok()));
    }
    Ok(())
}

fn start_times(s: &Setup, c: &Config, into: &mut Vec<u64>) -> Result<()> {
    for _ in 0..STARTS / ROUNDS {
        let t = Instant::now();
        let st = command(s, &s.libs, Path::new("/bin/true"), c).status()?;
        into.push(t.elapsed().as_nanos() as u64);
        if !st.success() {
            bail!("/bin/true failed under {}", c.name);
        }
    }
    Ok(())
}

/// `cargo xtask bench interposer [baseline=<older libgpuslice.so>]`.
pub fn run(args: &[String]) -> Result<()> {
    let mut baseline = None;
    for a in args {
        match a.split_once('=') {
            Some(("baseline", p)) => baseline = Some(PathBuf::from(p)),
            _ => bail!("unknown argument {a:?} (expected baseline=<path to libgpuslice.so>)"),
        }
    }
    let s = setup(baseline)?;
    let configs: Vec<&Config> = CONFIGS
        .iter()
        .filter(|c| c.preload != Lib::Baseline || s.baseline.is_some())
        .collect();
    let mut results: Vec<(&'static str, Samples)> = Vec::new();
    let mut starts: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    let mut calls: Calls = BTreeMap::new();
    for (driver, libs) in &s.drivers {
        let mut all: Samples = BTreeMap::new();
        for round in 0..ROUNDS {
            // Alternate the order so drift (other load, frequency) hits every configuration.
            let order: Vec<&Config> = if round % 2 == 0 {
                configs.clone()
            } else {
                configs.iter().rev().copied().collect()
            };
            for c in order {
                if c.slice.is_some() && *driver != "stub driver" {
                    continue;
                }
                eprintln!("{driver}: round {}/{ROUNDS}: {}", round + 1, c.name);
                run_client(&s, libs, c, &mut all, &mut calls)?;
                if *driver == "simulated GPU" {
                    start_times(&s, c, starts.entry(c.name).or_default())?;
                }
            }
        }
        results.push((driver, all));
    }
    let _ = std::fs::remove_dir_all(s.libs.parent().unwrap_or(&s.libs));
    match &s.baseline {
        Some(b) => println!(
            "command: cargo xtask bench interposer baseline={}",
            b.display()
        ),
        None => println!("command: cargo xtask bench interposer"),
    }
    println!(
        "{ROUNDS} alternating rounds per configuration, {SAMPLES} samples per op per round \
         (alloc/free: a quarter), each sample the mean of 16 calls; ns per call"
    );
    for (driver, all) in &results {
        println!("\n{driver}:\n");
        println!(
            "| op | without: median / p99 | with, no request: median / p99 | added median | ratio | with, capped: median / p99 | added median | ratio |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        let stats = |cfg: &str, op: &str| -> (u64, u64) {
            let mut v = all
                .get(cfg)
                .and_then(|m| m.get(op))
                .cloned()
                .unwrap_or_default();
            v.sort_unstable();
            (percentile(&v, 0.5), percentile(&v, 0.99))
        };
        for op in ["launch", "alloc_free", "mem_get_info"] {
            let (b, b99) = stats("without", op);
            let (p, p99) = stats("with, no request", op);
            let (c, c99) = stats("with, capped", op);
            let ratio = |x: u64| x as f64 / b.max(1) as f64;
            println!(
                "| {op} | {b} / {b99} | {p} / {p99} | {:+} | {:.2} | {c} / {c99} | {:+} | {:.2} |",
                p as i64 - b as i64,
                ratio(p),
                c as i64 - b as i64,
                ratio(c)
            );
        }
    }
    if s.baseline.is_some() {
        println!("\nthis tree against the baseline library, ns per call (median; ratio this/baseline):\n");
        println!("| driver | op | baseline, no request | this, no request | ratio | baseline, capped | this, capped | ratio |");
        println!("|---|---|---|---|---|---|---|---|");
        for (driver, all) in &results {
            let med = |cfg: &str, op: &str| -> u64 {
                let mut v = all
                    .get(cfg)
                    .and_then(|m| m.get(op))
                    .cloned()
                    .unwrap_or_default();
                v.sort_unstable();
                percentile(&v, 0.5)
            };
            for op in ["launch", "alloc_free", "mem_get_info"] {
                let (bp, tp) = (med("baseline, no request", op), med("with, no request", op));
                let (bc, tc) = (med("baseline, capped", op), med("with, capped", op));
                println!(
                    "| {driver} | {op} | {bp} | {tp} | {:.2} | {bc} | {tc} | {:.2} |",
                    tp as f64 / bp.max(1) as f64,
                    tc as f64 / bc.max(1) as f64
                );
            }
        }
    }
    println!(
        "\nstub driver, launches (cuLaunchKernel of noop, legacy stream) by the state of the \
         launch gate, ns per call (median / p99; added = − without):\n"
    );
    println!("| configuration | median / p99 | added median |");
    println!("|---|---|---|");
    if let Some((_, all)) = results.iter().find(|(d, _)| *d == "stub driver") {
        let med = |cfg: &str| -> (u64, u64) {
            let mut v = all
                .get(cfg)
                .and_then(|m| m.get("launch"))
                .cloned()
                .unwrap_or_default();
            v.sort_unstable();
            (percentile(&v, 0.5), percentile(&v, 0.99))
        };
        let (b, _) = med("without");
        for c in &configs {
            let (m, p) = med(c.name);
            println!("| {} | {m} / {p} | {:+} |", c.name, m as i64 - b as i64);
        }
    }
    println!(
        "\nstub driver, driver calls per launch (the launch itself included; launching thread, \
         then the whole process with the gate thread's background waits):\n"
    );
    println!("| configuration | launching thread | process |");
    println!("|---|---|---|");
    for c in &configs {
        let get = |scope: &str| {
            calls
                .get(c.name)
                .and_then(|m| m.get(scope))
                .cloned()
                .unwrap_or_else(|| "n/a".into())
        };
        println!("| {} | {} | {} |", c.name, get("thread"), get("process"));
    }
    println!("\nstart of /bin/true (a process that never touches CUDA), µs:\n");
    println!("| configuration | median | p99 |");
    println!("|---|---|---|");
    for c in &configs {
        let mut v = starts.get(c.name).cloned().unwrap_or_default();
        v.sort_unstable();
        println!(
            "| {} | {:.0} | {:.0} |",
            c.name,
            percentile(&v, 0.5) as f64 / 1000.0,
            percentile(&v, 0.99) as f64 / 1000.0
        );
    }
    Ok(())
}
