//! End to end on the simulated GPU: the real `gpuslice-arbiter` admits two slices with
//! guarantees 30/70, two saturating `gpuslice-workload` processes run under `libgpuslice.so` in
//! them, and the kernels each completed must split about 30/70 (generous tolerance: ±8 points
//! over 3 s on a shared 2-core machine). Also: a live memory-cap update reaches the slice's
//! `limits` file within 100 ms.
//!
//! Needs the simulator, the interposer and the workload built into the same target directory:
//! `cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml -p gpuslice-interposer -p gpuslice-workloads`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

struct Node {
    dir: PathBuf,
    arbiter: Child,
}

impl Node {
    fn start(tag: &str) -> Node {
        let prof = profile_dir();
        for f in [
            "libcuda.so",
            "libnvidia_ml.so",
            "libgpuslice.so",
            "gpuslice-workload",
        ] {
            assert!(
                prof.join(f).exists(),
                "{} missing: cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml \
                 -p gpuslice-interposer -p gpuslice-workloads",
                prof.join(f).display()
            );
        }
        let dir = std::env::temp_dir().join(format!("gpuslice-h7-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::create_dir_all(dir.join("state")).unwrap();
        std::os::unix::fs::symlink(prof.join("libcuda.so"), dir.join("lib/libcuda.so.1")).unwrap();
        std::os::unix::fs::symlink(
            prof.join("libnvidia_ml.so"),
            dir.join("lib/libnvidia-ml.so.1"),
        )
        .unwrap();
        std::fs::write(
            dir.join("config.toml"),
            "[metrics]\nenabled = false\n[admission]\ncontext_reserve = \"16Mi\"\n",
        )
        .unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpuslice-arbiter"));
        c.arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--config")
            .arg(dir.join("config.toml"))
            .env("GPUSLICE_NVML_LIBRARY", dir.join("lib/libnvidia-ml.so.1"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null());
        Self::sim_env(&mut c, &dir);
        let arbiter = c.spawn().expect("starting the arbiter");
        let t0 = Instant::now();
        while UnixStream::connect(dir.join("state/arbiter.sock")).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(20), "arbiter socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        Node { dir, arbiter }
    }

    fn sim_env(c: &mut Command, dir: &Path) {
        c.env("LD_LIBRARY_PATH", dir.join("lib"))
            .env("GPUSLICE_SIM_STATE", dir.join("sim.state"))
            .env(
                "GPUSLICE_SIM_DEVICES",
                "name=Test GPU 8G,mem=8Gi,sms=16,cc=9.0",
            )
            .env("GPUSLICE_SIM_CTX_OVERHEAD", "0");
    }

    fn req(&self, body: &str) -> String {
        let mut s = UnixStream::connect(self.dir.join("state/arbiter.sock")).unwrap();
        writeln!(s, "{{\"version\":1,{body}}}").unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        assert!(!line.contains("\"error\""), "{body}: {line}");
        line
    }

    fn admit(&self, id: &str, request: &str) -> PathBuf {
        self.req(&format!(
            "\"op\":\"admit\",\"slice_id\":\"{id}\",\"request\":{{{request}}}"
        ));
        self.dir.join("state").join(id)
    }

    fn tenant(&self, slice: &Path, args: &[&str]) -> Child {
        let prof = profile_dir();
        let mut c = Command::new(prof.join("gpuslice-workload"));
        c.args(["--via", "dlsym"])
            .args(args)
            .env("LD_PRELOAD", prof.join("libgpuslice.so"))
            .env("GPUSLICE_SLICE_DIR", slice)
            .stdout(Stdio::piped());
        Self::sim_env(&mut c, &self.dir);
        c.spawn().expect("starting a tenant")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.arbiter.kill();
        let _ = self.arbiter.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn kernels(c: Child) -> u64 {
    let o = c.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "tenant failed: {text}");
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix("kernels="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no kernels= in {text}"))
}

#[test]
fn guarantees_30_70_split_the_device() {
    let n = Node::start("3070");
    let a = n.admit("a", "\"compute\":30,\"memory\":\"1Gi\"");
    let b = n.admit("b", "\"compute\":70,\"memory\":\"1Gi\"");
    let args = [
        "saturate",
        "--kernel-us",
        "1000",
        "--seconds",
        "3",
        "--depth",
        "8",
    ];
    let ta = n.tenant(&a, &args);
    let tb = n.tenant(&b, &args);
    let (ka, kb) = (kernels(ta), kernels(tb));
    let share = ka as f64 / (ka + kb) as f64;
    assert!(
        (share - 0.30).abs() <= 0.08,
        "A ran {ka} kernels, B {kb}: A's share {share:.3}, wanted 0.30 ± 0.08"
    );
    // Both made progress: the device was not left idle for long.
    assert!(ka + kb > 1500, "only {} kernels of 1 ms in 3 s", ka + kb);
}

#[test]
fn memory_update_reaches_the_limits_file_at_once() {
    let n = Node::start("resize");
    let a = n.admit("a", "\"compute\":30,\"memory\":\"1Gi\"");
    let limits = gpuslice_region::Limits::open(&a).expect("limits");
    assert_eq!(limits.memory_cap(0), 1 << 30);
    let t0 = Instant::now();
    n.req("\"op\":\"update\",\"slice_id\":\"a\",\"memory\":\"512Mi\",\"compute\":40");
    while limits.memory_cap(0) != 512 << 20 {
        assert!(t0.elapsed() < Duration::from_millis(100), "cap not updated");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(limits.device(0).map(|d| d.compute_guarantee), Some(4000));
}
