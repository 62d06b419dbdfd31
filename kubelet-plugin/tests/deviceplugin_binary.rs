//! The `gpuslice-kubelet-plugin` binary in `--mode device-plugin` on the simulated NVML, against
//! the kubelet stand-in (`gpuslice_test_support::kubelet::Kubelet`; NOT a real kubelet: registration server and
//! plugin client) in a scratch device-plugins directory, with no arbiter running: it registers,
//! lists its units all `Unhealthy` (nothing can be admitted), refuses a second mode on the same
//! node, and on SIGTERM stops and removes its socket.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpuslice_kubelet_plugin::deviceplugin::{RESOURCE, SOCKET, UNHEALTHY};
use gpuslice_test_support::kubelet::Kubelet;

const BIN: &str = env!("CARGO_BIN_EXE_gpuslice-kubelet-plugin");

fn nvml() -> Option<PathBuf> {
    let p = Path::new(BIN).parent()?.join("libnvidia_ml.so");
    if !p.is_file() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no simulated NVML: cargo build -p gpuslice-sim-nvml"
        );
        eprintln!("\n*** SKIPPED: no simulated NVML (cargo build -p gpuslice-sim-nvml) ***\n");
        return None;
    }
    Some(p)
}

fn cmd(nvml: &Path, root: &Path, mode: &str) -> Command {
    let mut c = base(nvml, root, mode, Path::new("/dev/null"));
    c.args(["--unit", "256Mi"]);
    c
}

/// The plugin with the node configuration `config` and no `--unit`.
fn base(nvml: &Path, root: &Path, mode: &str, config: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(["--mode", mode, "--node-name", "node-a", "--config"])
        .arg(config)
        .arg("--state-dir")
        .arg(root.join("state"))
        .arg("--device-plugin-dir")
        .arg(root.join("device-plugins"))
        .args(["--device-plugin-poll", "1"])
        .arg("--claims-from")
        .arg(root.join("claims"))
        .env("GPUSLICE_NVML_LIBRARY", nvml)
        .env("GPUSLICE_SIM_STATE", root.join("sim-state"))
        .env_remove("GPUSLICE_GPU_MEMORY_UNIT")
        .env_remove("RUST_LOG");
    c
}

#[test]
fn binary_device_plugin_registers_lists_refuses_a_second_mode_and_stops() {
    let Some(nvml) = nvml() else { return };
    let root = std::env::temp_dir().join(format!("gs-dp-bin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("device-plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let wait = Duration::from_secs(20);
    let mut kubelet = rt.block_on(async { Kubelet::start(&dir) }).unwrap();
    let mut child = cmd(&nvml, &root, "device-plugin")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let reg = rt
        .block_on(kubelet.wait_registrations(1, wait))
        .unwrap()
        .remove(0);
    assert_eq!(
        (reg.resource_name.as_str(), reg.endpoint.as_str()),
        (RESOURCE, SOCKET)
    );
    let devices = rt
        .block_on(kubelet.wait_devices("the first list", wait, |d| !d.is_empty()))
        .unwrap();
    assert!(!devices.is_empty());
    // Registered and listing with every capability dropped (as root).
    common::assert_no_capabilities(child.id());
    // No arbiter: nothing could be admitted, so no unit is offered as healthy.
    assert!(devices.iter().all(|d| d.health == UNHEALTHY), "{devices:?}");
    // The DRA mode on the same node is refused while this one runs.
    let second = cmd(&nvml, &root, "dra").output().unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success());
    assert!(
        err.contains("another gpuslice-kubelet-plugin runs on this node (--mode device-plugin"),
        "{err}"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(!dir.join(SOCKET).exists());
    let _ = std::fs::remove_dir_all(&root);
}

/// How many devices the plugin lists when started with `config` (and `extra` flags) on a
/// simulated 40 GiB GPU, or its exit and stderr when it refuses to start.
fn listed(nvml: &Path, tag: &str, config: &str, extra: &[&str]) -> Result<usize, String> {
    let root = std::env::temp_dir().join(format!("gs-dp-unit-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("device-plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let file = root.join("config.toml");
    std::fs::write(&file, config).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut kubelet = rt.block_on(async { Kubelet::start(&dir) }).unwrap();
    let mut child = base(nvml, &root, "device-plugin", &file)
        .args(extra)
        .env("GPUSLICE_SIM_DEVICES", "mem=40Gi")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let wait = Duration::from_secs(20);
    let deadline = Instant::now() + wait;
    let result = loop {
        if child.try_wait().unwrap().is_some() {
            let o = child.wait_with_output().unwrap();
            break Err(format!(
                "{}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        if let Ok(d) =
            rt.block_on(
                kubelet.wait_devices("a list", Duration::from_millis(200), |d| !d.is_empty()),
            )
        {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
            break Ok(d.len());
        }
        assert!(Instant::now() < deadline, "{tag}: no list and no exit");
    };
    kubelet.stop();
    let _ = std::fs::remove_dir_all(&root);
    result
}

#[test]
fn binary_device_plugin_unit_from_the_node_configuration_and_the_flag_overrides_it() {
    let Some(nvml) = nvml() else { return };
    // (40 GiB − 8 × 904 MiB) / unit: no arbiter has measured this node's contexts yet, so the
    // charge is the assumed H200 context (518 MiB) with its margin (130 MiB) plus the module
    // allowance (256 MiB).
    assert_eq!(listed(&nvml, "default", "", &[]), Ok(32));
    let cfg = "[kubernetes]\ndevice_plugin_unit = \"256Mi\"\n";
    assert_eq!(listed(&nvml, "config", cfg, &[]), Ok(131));
    assert_eq!(listed(&nvml, "flag", cfg, &["--unit", "1Gi"]), Ok(32));
    let e = listed(
        &nvml,
        "bad",
        "[kubernetes]\ndevice_plugin_unit = \"1000\"\n",
        &[],
    )
    .unwrap_err();
    println!("{e}");
    assert!(
        e.contains("kubernetes.device_plugin_unit = 1000 bytes: must be a whole number of MiB"),
        "{e}"
    );
    let e = listed(
        &nvml,
        "huge",
        "[kubernetes]\ndevice_plugin_unit = \"64Gi\"\n",
        &[],
    )
    .unwrap_err();
    println!("{e}");
    assert!(
        e.contains("no GPU of this node offers a whole unit of kubernetes.device_plugin_unit"),
        "{e}"
    );
}
