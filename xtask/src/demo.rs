//! `cargo xtask demo`: the main story, on the simulated GPU when no NVIDIA driver is present.
//!
//! It builds what it runs (a partial dist tree, `target/demo-dist/`), starts `gpuslice-arbiter` on
//! a simulated node (an H100-class and an A100-class device), runs three tenants on GPU 0 with
//! `gpuslice run` — different memory caps, guarantees, a ceiling and a high-priority inference
//! loop — prints a live table from `gpuslice status --json` (achieved share over the last second,
//! memory in use), resizes one tenant live, lets one finish so its time flows to the others, shows
//! a fourth tenant stopped at its memory cap, and ends with what each tenant measured.

use crate::dist;
use crate::simenv::SimNode;
use anyhow::{bail, Context, Result};
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
    dist::build_part("demo", "demo-dist", &RUNS)
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
        println!("so on real hardware use tests/gpu/ (issue #8). Showing the real devices:");
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
    let node = SimNode::new(&dist, DEMO_DEVICES)?;
    println!("gpuslice demo on the SIMULATED GPU (no NVIDIA driver here)");
    println!("node: {}", DEMO_DEVICES.replace(';', " | "));
    let arbiter = Arbiter::start(&node)?;
    println!(
        "arbiter: {} (state {})",
        arbiter.socket().display(),
        arbiter.state.display()
    );

    println!("\nThree tenants on GPU 0, each started with `gpuslice run`:");
    println!("  trainer    --memory 16Gi --compute 30               1 ms kernels, 8 queued, 14 s");
    println!(
        "  batch      --memory 8Gi  --compute 50 --compute-limit 60   1 ms kernels, 8 queued, 7 s"
    );
    println!(
        "  inference  --memory 4Gi  --priority high            one 1 ms request every 20 ms, 14 s"
    );
    println!(
        "At 4 s the trainer is resized live to --compute 40; at 7 s the batch job ends and its"
    );
    println!("time flows to the trainer.\n");
    let work = |a: &[&str]| -> Vec<String> {
        ["--via", "dlsym"]
            .iter()
            .chain(a)
            .map(|s| s.to_string())
            .collect()
    };
    let tenants: Vec<(&str, Vec<&str>, Vec<String>)> = vec![
        (
            "trainer",
            vec!["--memory", "16Gi", "--compute", "30"],
            work(&[
                "saturate",
                "--kernel-us",
                "1000",
                "--seconds",
                "14",
                "--depth",
                "8",
            ]),
        ),
        (
            "batch",
            vec![
                "--memory",
                "8Gi",
                "--compute",
                "50",
                "--compute-limit",
                "60",
            ],
            work(&[
                "saturate",
                "--kernel-us",
                "1000",
                "--seconds",
                "7",
                "--depth",
                "8",
            ]),
        ),
        (
            "inference",
            vec!["--memory", "4Gi", "--priority", "high"],
            work(&[
                "bursty",
                "--kernel-us",
                "1000",
                "--rate",
                "50",
                "--seconds",
                "14",
            ]),
        ),
    ];
    let mut children: Vec<(&str, Child)> = Vec::new();
    for (name, opts, cmd) in &tenants {
        let child = arbiter
            .gpuslice()
            .arg("run")
            .args(opts)
            .arg("--")
            .arg(dist.join("sim/bin/gpuslice-workload"))
            .args(cmd)
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting tenant {name}"))?;
        children.push((name, child));
    }
    let ids: Vec<(&str, String)> = children
        .iter()
        .map(|(n, c)| (*n, format!("run-{}-", c.id())))
        .collect();
    println!(
        "{:>5}  {:>22}  {:>22}  {:>22}",
        "t(s)", "trainer ach% / mem", "batch ach% / mem", "inference ach% / mem"
    );
    let start = Instant::now();
    let mut resized = false;
    while start.elapsed() < Duration::from_millis(14_500) {
        std::thread::sleep(Duration::from_millis(1000));
        let status = arbiter.status()?;
        let cells: Vec<String> = ids
            .iter()
            .map(|(_, prefix)| cell(&status, prefix))
            .collect();
        println!(
            "{:>5.1}  {:>22}  {:>22}  {:>22}",
            start.elapsed().as_secs_f64(),
            cells[0],
            cells[1],
            cells[2]
        );
        if !resized && start.elapsed() >= Duration::from_secs(4) {
            resized = true;
            if let Some(id) = slice_of(&status, &ids[0].1) {
                let out = arbiter
                    .gpuslice()
                    .args(["update", &id, "--compute", "40"])
                    .output()?;
                println!(
                    "       live resize: gpuslice update {id} --compute 40 -> {}",
                    if out.status.success() {
                        "applied"
                    } else {
                        "refused"
                    }
                );
            }
        }
    }
    println!("\nwhat each tenant measured:");
    for (name, child) in children {
        let out = child.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("tenant {name} failed ({}): {text}", out.status);
        }
        println!("  {name:<10} {}", text.trim());
    }

    println!("\nA fourth tenant asks for 2 GiB on the 40 GiB GPU and allocates 512 MiB blocks:");
    let out = arbiter
        .gpuslice()
        .args(["run", "--memory", "2Gi", "--model", "A100", "--"])
        .arg(dist.join("sim/bin/gpuslice-workload"))
        .args(["--via", "dlsym", "fill", "--chunk", "512Mi"])
        .output()
        .context("running the fill tenant")?;
    println!("  {}", String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() {
        bail!(
            "fill tenant failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    println!(
        "\nsummary: the fourth tenant stopped at exactly its 2 GiB cap on a 40 GiB device; the"
    );
    println!(
        "table shows each tenant's achieved share (as the arbiter charged it) next to the live"
    );
    println!("resize and the batch job's exit, and the tenants' own counts are printed above. How");
    println!(
        "closely shares follow guarantees, ceilings and priority is measured, with the misses,"
    );
    println!("by `cargo xtask bench share` (docs/benchmarks.md).");
    Ok(())
}

/// A gpuslice-arbiter started for the demo on the simulated node, stopped on drop.
struct Arbiter {
    child: Child,
    state: PathBuf,
    dist: PathBuf,
    env: Vec<(String, String)>,
}

impl Arbiter {
    fn start(node: &SimNode) -> Result<Arbiter> {
        let state = node.state_dir.join("gpuslice");
        std::fs::create_dir_all(&state)?;
        let config = node.state_dir.join("config.toml");
        std::fs::write(&config, "[metrics]\nenabled = false\n")?;
        let mut env = node.env();
        env.push(("GPUSLICE_CONFIG".into(), config.display().to_string()));
        env.push(("GPUSLICE_STATE_DIR".into(), state.display().to_string()));
        let child = Command::new(node.dist.join("usr/bin/gpuslice-arbiter"))
            .envs(env.iter().cloned())
            .env("GPUSLICE_NVML_LIBRARY", node.nvml_lib())
            .env("RUST_LOG", "warn")
            .stderr(Stdio::null())
            .spawn()
            .context("starting gpuslice-arbiter")?;
        let a = Arbiter {
            child,
            state,
            dist: node.dist.clone(),
            env,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !a.socket().exists() {
            if Instant::now() > deadline {
                bail!("gpuslice-arbiter did not create {}", a.socket().display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(a)
    }

    fn socket(&self) -> PathBuf {
        self.state.join("arbiter.sock")
    }

    /// The `gpuslice` CLI of the dist tree, pointed at this arbiter and the simulated node.
    fn gpuslice(&self) -> Command {
        let mut c = Command::new(self.dist.join("usr/bin/gpuslice"));
        c.envs(self.env.iter().cloned());
        c
    }

    /// `gpuslice status --json`.
    fn status(&self) -> Result<serde_json::Value> {
        let out = self.gpuslice().args(["status", "--json"]).output()?;
        if !out.status.success() {
            bail!(
                "gpuslice status failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }
}

impl Drop for Arbiter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status row of the slice whose id starts with `prefix` (`run-<pid>-`).
fn slice_row<'a>(status: &'a serde_json::Value, prefix: &str) -> Option<&'a serde_json::Value> {
    status["devices"].as_array()?.iter().find_map(|d| {
        d["slices"].as_array()?.iter().find(|s| {
            s["slice_id"]
                .as_str()
                .is_some_and(|id| id.starts_with(prefix))
        })
    })
}

fn slice_of(status: &serde_json::Value, prefix: &str) -> Option<String> {
    Some(slice_row(status, prefix)?["slice_id"].as_str()?.to_string())
}

/// "achieved 1 s % / memory used" of one tenant, or "-" before it is admitted / after it left.
fn cell(status: &serde_json::Value, prefix: &str) -> String {
    let Some(row) = slice_row(status, prefix) else {
        return "-".into();
    };
    let ach = row["achieved_1s"]
        .as_f64()
        .map_or("n/a".into(), |p| format!("{p:.1}%"));
    let mem = row["memory_used"]
        .as_u64()
        .map_or("n/a".into(), |b| format!("{} MiB", b >> 20));
    format!("{ach} / {mem}")
}

/// The issue-2 acceptance checks, run from a dist tree through each way of reaching the driver.
pub fn acceptance(dist: &Path) -> Result<()> {
    let node = SimNode::new(dist, "name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0")?;
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
