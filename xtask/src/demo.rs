//! `cargo xtask demo`: the main story, on the simulated GPU when no NVIDIA driver is present.
//!
//! At this stage (before the interposer and arbiter exist) it shows the simulated node itself: two
//! heterogeneous devices, three tenants contending for device 0 with different kernel sizes and
//! patterns, a live table read through NVML while they run, and a fourth tenant filling device 1
//! to `CUDA_ERROR_OUT_OF_MEMORY`. Later issues add caps, shares and priorities to the same story.

use crate::dist;
use crate::simenv::SimNode;
use anyhow::{bail, Context, Result};
use nvml_wrapper::Nvml;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The demo's node: an H100-class and an A100-class device.
pub const DEMO_DEVICES: &str = "name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0;\
name=NVIDIA A100-SXM4-40GB,mem=40Gi,sms=108,cc=8.0";

/// Whether a real NVIDIA driver is present on this machine.
fn real_driver_present() -> bool {
    Path::new("/proc/driver/nvidia/version").exists()
}

pub fn run(force_sim: bool) -> Result<()> {
    let dist = dist::run()?;
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
    let node = SimNode::new(&dist, DEMO_DEVICES)?;
    for (k, v) in node.env() {
        // The demo reads NVML in-process; the simulator finds its state through these.
        std::env::set_var(k, v);
    }
    println!("gpuslice demo on the SIMULATED GPU (no NVIDIA driver here)");
    println!("node: {}", DEMO_DEVICES.replace(';', " | "));
    let nvml = Nvml::builder()
        .lib_path(node.nvml_lib().as_os_str())
        .init()
        .context("loading the simulated NVML")?;

    println!("\nThree tenants share GPU 0 with no gpuslice limits yet (the interposer and arbiter");
    println!(
        "come in issues #3 and #4): a trainer with 5 ms kernels, a batch job with 1 ms kernels,"
    );
    println!("and an inference loop sending one 1 ms request every 20 ms.\n");
    let tenants: Vec<(&str, Vec<String>)> = vec![
        (
            "trainer",
            args(&["saturate", "--kernel-us", "5000", "--seconds", "4"]),
        ),
        (
            "batch",
            args(&[
                "saturate",
                "--kernel-us",
                "1000",
                "--seconds",
                "4",
                "--depth",
                "4",
            ]),
        ),
        (
            "inference",
            args(&[
                "bursty",
                "--kernel-us",
                "1000",
                "--rate",
                "50",
                "--seconds",
                "4",
            ]),
        ),
    ];
    let mut children: Vec<(&str, Child)> = Vec::new();
    for (name, a) in &tenants {
        let child = node
            .workload()
            .args(a)
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting tenant {name}"))?;
        children.push((name, child));
    }
    live_table(&nvml, &children, Duration::from_millis(4300))?;
    println!("\nwhat each tenant measured:");
    for (name, child) in children {
        let out = child.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("tenant {name} failed: {text}");
        }
        println!("  {name:<10} {}", text.trim());
    }

    println!("\nA fourth tenant fills GPU 1 (40 GiB) in 4 GiB blocks until the driver refuses:");
    let out = node
        .workload()
        .args(["--device", "1", "fill", "--chunk", "4Gi"])
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
        "\nsummary: the simulated node time-slices one engine per device between processes and"
    );
    println!(
        "accounts memory exactly; with nothing in between, the busiest tenant takes the most time"
    );
    println!(
        "and any tenant may take all memory. gpuslice's caps and shares are what later issues add."
    );
    Ok(())
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Prints GPU 0's utilisation, memory and per-process memory every half second.
fn live_table(nvml: &Nvml, children: &[(&str, Child)], for_how_long: Duration) -> Result<()> {
    println!(
        "{:>5}  {:>5}  {:>10}  per-process memory (MiB)",
        "t(s)", "util", "used MiB"
    );
    let start = Instant::now();
    while start.elapsed() < for_how_long {
        std::thread::sleep(Duration::from_millis(500));
        let d = nvml.device_by_index(0)?;
        let util = d.utilization_rates().map(|u| u.gpu).unwrap_or(0);
        let mem = d.memory_info()?;
        let procs = d.running_compute_processes()?;
        let mut cells = Vec::new();
        for (name, child) in children {
            let used =
                procs
                    .iter()
                    .find(|p| p.pid == child.id())
                    .map(|p| match p.used_gpu_memory {
                        nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => b >> 20,
                        nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => 0,
                    });
            cells.push(format!(
                "{name}={}",
                used.map_or("-".into(), |u| u.to_string())
            ));
        }
        println!(
            "{:>5.1}  {:>4}%  {:>10}  {}",
            start.elapsed().as_secs_f64(),
            util,
            mem.used >> 20,
            cells.join("  ")
        );
    }
    Ok(())
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
