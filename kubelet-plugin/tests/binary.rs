//! The `gpuslice-kubelet-plugin` binary in DRA mode, wired up as a node runs it: NVML (the
//! simulated one), a kubeconfig pointing at the API stand-in (NOT a real API server: see
//! `common::apiserver`), its sockets in scratch kubelet directories. It publishes the node's
//! pool, serves registration and DRA sockets, and on SIGTERM stops and removes them. A
//! kubeconfig that cannot be read stops it at start with a message naming the file.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::apiserver::StandIn;
use common::kubelet;
use gpuslice_kubelet_plugin::dra::apiserver::connect;

const BIN: &str = env!("CARGO_BIN_EXE_gpuslice-kubelet-plugin");

/// The simulated NVML the workspace builds (`libnvidia_ml.so` beside the binaries), or
/// `GPUSLICE_TEST_SIM_NVML`; without it the test says SKIPPED (a failure under `CI=true`).
fn simulated_nvml() -> Option<PathBuf> {
    let built = Path::new(BIN).parent().map(|d| d.join("libnvidia_ml.so"));
    let found = std::env::var_os("GPUSLICE_TEST_SIM_NVML")
        .map(PathBuf::from)
        .or(built)
        .filter(|p| p.is_file());
    if found.is_none() {
        let ci = std::env::var("CI").as_deref() == Ok("true");
        assert!(!ci, "no simulated NVML: cargo build -p gpuslice-sim-nvml");
        eprintln!("\n*** SKIPPED: no simulated NVML (cargo build -p gpuslice-sim-nvml) ***\n");
    }
    found
}

struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn plugin(nvml: &Path, root: &Path, kubeconfig: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args([
        "--mode",
        "dra",
        "--node-name",
        "node-a",
        "--config",
        "/dev/null",
    ])
    .arg("--state-dir")
    .arg(root.join("state"))
    .arg("--registry-dir")
    .arg(root.join("plugins_registry"))
    .arg("--plugin-dir")
    .arg(root.join("plugins/gpuslice.io"))
    .arg("--cdi-dir")
    .arg(root.join("cdi"))
    .arg("--kubeconfig")
    .arg(kubeconfig)
    .args(["--device-poll", "1"])
    .env("GPUSLICE_NVML_LIBRARY", nvml)
    .env("GPUSLICE_SIM_STATE", root.join("sim-state"))
    .env_remove("RUST_LOG");
    c
}

/// The binary running against an API stand-in, under a scratch root.
struct Running {
    root: PathBuf,
    rt: tokio::runtime::Runtime,
    api: StandIn,
    kubeconfig: PathBuf,
    plugin: Plugin,
}

fn start(nvml: &Path, tag: &str) -> Running {
    let root = std::env::temp_dir().join(format!("gs-kp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let api = StandIn::start(&rt);
    let kubeconfig = api.kubeconfig(&root);
    let plugin = Plugin(
        plugin(nvml, &root, &kubeconfig)
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    Running {
        root,
        rt,
        api,
        kubeconfig,
        plugin,
    }
}

#[test]
fn binary_publishes_serves_and_stops_on_sigterm_against_the_api_standin() {
    let Some(nvml) = simulated_nvml() else {
        return;
    };
    let Running {
        root,
        rt: _rt,
        api,
        kubeconfig: _,
        plugin: mut p,
    } = start(&nvml, "bin");
    let reg = root.join("plugins_registry/gpuslice.io-reg.sock");
    let dra = root.join("plugins/gpuslice.io/dra.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let published = !api.state().slices.is_empty();
        if published && reg.exists() && dra.exists() {
            break;
        }
        assert!(p.0.try_wait().unwrap().is_none(), "the plugin exited early");
        assert!(
            Instant::now() < deadline,
            "not published and serving after 30 s: slices {:?}, {} {}",
            api.state().log,
            reg.exists(),
            dra.exists()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Serving with every capability dropped (as root).
    common::assert_no_capabilities(p.0.id());
    let slices: Vec<_> = api.state().slices.values().cloned().collect();
    assert_eq!(slices.len(), 1);
    let s = &slices[0];
    assert_eq!(s.metadata.name.as_deref(), Some("node-a-gpuslice.io-0"));
    assert_eq!(s.spec.node_name.as_deref(), Some("node-a"));
    let devices = s.spec.devices.as_ref().unwrap();
    assert!(!devices.is_empty());
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d.name, format!("gpu-{i}"));
        let attrs = d.attributes.as_ref().unwrap();
        assert!(attrs["uuid"].string.as_deref().unwrap().starts_with("GPU-"));
        let caps = d.capacity.as_ref().unwrap();
        for c in ["memory", "compute", "slices"] {
            assert!(caps.contains_key(c), "{c} missing on {}", d.name);
        }
    }
    // Running on: no rewrite of an unchanged pool at each device poll.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(api.state().slice_writes().len(), 1, "{:?}", api.state().log);
    let st = Command::new("kill")
        .args(["-TERM", &p.0.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(c) = p.0.try_wait().unwrap() {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "still running 20 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(code.success(), "exit {code}");
    assert!(!reg.exists() && !dra.exists(), "sockets left behind");

    // A kubeconfig that is not there: refused at start, naming it.
    let out = plugin(&nvml, &root, &root.join("no-kubeconfig"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("kubeconfig") && err.contains("no-kubeconfig"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A kubelet restart as the plugin sees it (the kubelet stand-in of `common::kubelet`: the
/// start-up wipe of the node's ResourceSlices through the API and a new registration, in both
/// orders) against the running binary with its default `--resync` (300 s): the pool is back
/// within 5 s each time.
#[test]
fn binary_republishes_within_5_s_after_a_kubelet_restart() {
    let Some(nvml) = simulated_nvml() else {
        return;
    };
    let Running {
        root,
        rt,
        api,
        kubeconfig: kc,
        plugin: _p,
    } = start(&nvml, "restart");
    let reg = root.join("plugins_registry/gpuslice.io-reg.sock");
    let published = |within: Duration| {
        let deadline = Instant::now() + within;
        while api.state().slices.is_empty() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    };
    assert!(published(Duration::from_secs(30)), "{:?}", api.state().log);
    while !reg.exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = rt
        .block_on(connect(Some(&kc), Duration::from_secs(5)))
        .unwrap();
    let generation = || {
        let st = api.state();
        st.slices.values().next().map(|s| s.spec.pool.generation)
    };
    for wipe_first in [true, false] {
        let order = if wipe_first { "before" } else { "after" };
        let before = generation();
        let wiped = if wipe_first {
            rt.block_on(kubelet::wipe(&client, "node-a"));
            let t = Instant::now();
            rt.block_on(kubelet::register(&reg));
            t
        } else {
            rt.block_on(kubelet::register(&reg));
            std::thread::sleep(Duration::from_millis(300));
            rt.block_on(kubelet::wipe(&client, "node-a"));
            Instant::now()
        };
        assert!(
            published(Duration::from_secs(5)),
            "wipe {order} registration: not back within 5 s: {:?}",
            api.state().log
        );
        eprintln!(
            "wipe {order} registration: pool back after {:?}",
            wiped.elapsed()
        );
        let now = generation();
        assert!(now > before, "generation {before:?} -> {now:?}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_driver_root_without_nvml_stops_the_plugin_naming_the_root() {
    // The manifests give the plugin the node's / as GPUSLICE_DRIVER_ROOT, no NVML path: NVML is
    // found through that root's loader cache (gpuslice_cdi::driver_root), or the plugin stops.
    let root = std::env::temp_dir().join(format!("gs-kp-driver-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("node/etc")).unwrap();
    let out = plugin(Path::new("unused"), &root, &root.join("kubeconfig"))
        .env_remove("GPUSLICE_NVML_LIBRARY")
        .env("GPUSLICE_DRIVER_ROOT", root.join("node"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "libnvidia-ml.so.1 not found under driver root {}",
            root.join("node").display()
        )),
        "{err}"
    );
    // Stopped before registering with kubelet.
    assert!(!root.join("plugins_registry/gpuslice.io-reg.sock").exists());
    let _ = std::fs::remove_dir_all(&root);
}
