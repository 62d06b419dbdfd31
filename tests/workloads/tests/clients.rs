//! The workload clients against the simulated driver, through each way of reaching it: linked,
//! `dlsym` of versioned names, and `cuGetProcAddress_v2` at several CUDA versions.
//! The simulated libraries are the ones cargo built into this target directory; each test gets a
//! private simulator state file and a small device so filling it is quick.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// target/<profile>, found from this test binary (target/<profile>/deps/clients-…).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// A private simulated node: a directory holding libcuda.so.1 / libnvidia-ml.so.1 links to the
/// built simulator, and a state file.
struct Node {
    dir: PathBuf,
}

impl Node {
    fn new(tag: &str) -> Node {
        let dir = std::env::temp_dir().join(format!("gpuslice-wl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let prof = profile_dir();
        for (built, soname) in [
            ("libcuda.so", "libcuda.so.1"),
            ("libnvidia_ml.so", "libnvidia-ml.so.1"),
        ] {
            let src = prof.join(built);
            assert!(
                src.exists(),
                "{} missing: build gpuslice-sim-cuda and gpuslice-sim-nvml first",
                src.display()
            );
            std::os::unix::fs::symlink(&src, dir.join(soname)).unwrap();
        }
        Node { dir }
    }

    fn run(&self, bin: &str, args: &[&str]) -> Output {
        Command::new(bin)
            .args(args)
            .env("LD_LIBRARY_PATH", &self.dir)
            .env("GPUSLICE_SIM_STATE", self.dir.join("state"))
            .env(
                "GPUSLICE_SIM_DEVICES",
                "name=Test GPU 2G,mem=2Gi,sms=16,cc=9.0;name=Test GPU 1G,mem=1Gi,sms=8,cc=8.0",
            )
            .env("GPUSLICE_SIM_CTX_OVERHEAD", "0")
            .env("GPUSLICE_SIM_MODULE_OVERHEAD", "0")
            .output()
            .expect("running a workload")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const DYN: &str = env!("CARGO_BIN_EXE_gpuslice-workload");
const LINKED: &str = env!("CARGO_BIN_EXE_gpuslice-workload-linked");

fn stdout_ok(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "workload failed: {}\nstdout: {out}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn field(text: &str, key: &str) -> u64 {
    let p = format!("{key}=");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&p))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        .parse()
        .unwrap_or_else(|_| panic!("bad {key} in {text}"))
}

/// Every way of reaching the driver sees the same totals, and allocation stops with OOM at capacity.
fn fill_and_totals(node: &Node, bin: &str, via: &[&str]) {
    let info = stdout_ok(&node.run(bin, &[via, &["info"]].concat()));
    let total = field(&info, "total_mem");
    assert_eq!(
        total,
        2 << 30,
        "cuDeviceTotalMem_v2 of a 2Gi device: {info}"
    );
    assert_eq!(
        field(&info, "meminfo_total"),
        total,
        "cuMemGetInfo_v2 total: {info}"
    );
    let nvml_line = info
        .lines()
        .find(|l| l.starts_with("nvml_device=0"))
        .expect("NVML line");
    assert_eq!(field(nvml_line, "total"), total, "NVML total: {info}");

    let fill = stdout_ok(&node.run(bin, &[via, &["fill", "--chunk", "256Mi"]].concat()));
    assert!(fill.contains("refusal=CUDA_ERROR_OUT_OF_MEMORY"), "{fill}");
    assert_eq!(
        field(&fill, "bytes"),
        2 << 30,
        "8 x 256Mi fit a 2Gi device exactly: {fill}"
    );
    assert_eq!(field(&fill, "free_after"), 0, "{fill}");
}

#[test]
fn linked_client() {
    let node = Node::new("linked");
    fill_and_totals(&node, LINKED, &[]);
}

#[test]
fn dlsym_client() {
    let node = Node::new("dlsym");
    fill_and_totals(&node, DYN, &["--via", "dlsym"]);
}

#[test]
fn procaddr_client_at_several_cuda_versions() {
    let node = Node::new("procaddr");
    for v in ["12000", "12080", "13000"] {
        fill_and_totals(&node, DYN, &["--via", "procaddr", "--cuda-version", v]);
    }
}

#[test]
fn second_device_is_addressed_by_ordinal() {
    let node = Node::new("dev1");
    let info = stdout_ok(&node.run(DYN, &["--device", "1", "info"]));
    assert_eq!(field(&info, "total_mem"), 1 << 30, "{info}");
    assert!(info.contains("name=\"Test GPU 1G\""), "{info}");
}

#[test]
fn linked_client_needs_the_driver_at_run_time() {
    let o = Command::new(LINKED)
        .arg("info")
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "a -lcuda binary cannot start without libcuda.so.1"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("libcuda.so.1"));
}

#[test]
fn threads_launch_and_allocate_concurrently() {
    let node = Node::new("threads");
    let out = stdout_ok(&node.run(
        DYN,
        &[
            "threads",
            "--threads",
            "4",
            "--kernel-us",
            "500",
            "--seconds",
            "1",
        ],
    ));
    assert!(field(&out, "launches") >= 4, "{out}");
    assert!(field(&out, "alloc_free_pairs") >= 4, "{out}");
}

#[test]
fn bursty_requests_take_at_least_their_kernel_time() {
    let node = Node::new("bursty");
    let out = stdout_ok(&node.run(
        DYN,
        &[
            "bursty",
            "--kernel-us",
            "2000",
            "--rate",
            "50",
            "--seconds",
            "1",
        ],
    ));
    let p50: f64 = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("p50_ms="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        p50 >= 2.0,
        "a 2 ms kernel cannot complete in {p50} ms: {out}"
    );
    assert!(field(&out, "requests") >= 40, "{out}");
}

#[test]
fn two_saturating_processes_share_the_engine() {
    let node = Node::new("contend");
    let out = stdout_ok(&node.run(
        DYN,
        &[
            "contend",
            "--procs",
            "2",
            "--kernel-us",
            "5000",
            "--seconds",
            "2",
        ],
    ));
    let shares: Vec<f64> = out
        .lines()
        .filter(|l| l.starts_with("proc="))
        .map(|l| l.split("share=").nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(shares.len(), 2, "{out}");
    let sum: f64 = shares.iter().sum();
    assert!(
        sum <= 1.0 + 1e-9,
        "one engine cannot give more than 100 %: {out}"
    );
    for s in &shares {
        assert!(
            (0.3..=0.7).contains(s),
            "each saturating process should get about half: {out}"
        );
    }
}

#[test]
fn fill_reports_a_non_oom_refusal_as_failure() {
    // A chunk larger than the device fails at once with OOM (success path); a zero-byte chunk is
    // refused by cuMemAlloc with CUDA_ERROR_INVALID_VALUE, which `fill` must report as a failure.
    let node = Node::new("fillerr");
    let o = node.run(DYN, &["fill", "--chunk", "0"]);
    assert!(
        !o.status.success(),
        "fill must fail when the refusal is not OOM"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("instead of CUDA_ERROR_OUT_OF_MEMORY"));
}
