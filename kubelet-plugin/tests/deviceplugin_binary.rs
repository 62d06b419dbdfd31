//! The `gpuslice-kubelet-plugin` binary in `--mode device-plugin` on the simulated NVML, against
//! the kubelet stand-in (`deviceplugin::standin::Kubelet`; NOT a real kubelet: registration server and
//! plugin client) in a scratch device-plugins directory, with no arbiter running: it registers,
//! lists its units all `Unhealthy` (nothing can be admitted), refuses a second mode on the same
//! node, and on SIGTERM stops and removes its socket.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpuslice_kubelet_plugin::deviceplugin::standin::Kubelet;
use gpuslice_kubelet_plugin::deviceplugin::{RESOURCE, SOCKET, UNHEALTHY};

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
    let mut c = Command::new(BIN);
    c.args([
        "--mode",
        mode,
        "--node-name",
        "node-a",
        "--config",
        "/dev/null",
    ])
    .arg("--state-dir")
    .arg(root.join("state"))
    .arg("--device-plugin-dir")
    .arg(root.join("device-plugins"))
    .args(["--device-plugin-poll", "1", "--unit", "256Mi"])
    .arg("--claims-from")
    .arg(root.join("claims"))
    .env("GPUSLICE_NVML_LIBRARY", nvml)
    .env("GPUSLICE_SIM_STATE", root.join("sim-state"))
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
