//! End to end on the simulated GPU: the real `gpuslice-arbiter` binary, `gpuslice run` with the
//! real interposer, workloads from `gpuslice-workloads`. Checks what only the whole chain shows:
//! `status` reads the memory a tenant holds, the metrics endpoint reports achieved shares for
//! `run` slices, the arbiter reclaims a SIGKILLed tenant's memory, and slices go away with their
//! commands. Needs the simulated driver, the interposer and the workloads built in the same
//! profile (`cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml -p gpuslice-interposer
//! -p gpuslice-workloads -p gpuslice-arbiter`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GI: u64 = 1 << 30;

fn profile_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_gpuslice"));
    exe.parent().unwrap().to_path_buf()
}

struct Node {
    dir: PathBuf,
    arbiter: Child,
    metrics: String,
}

impl Node {
    fn start(tag: &str) -> Node {
        let prof = profile_dir();
        for f in [
            "libcuda.so",
            "libnvidia_ml.so",
            "libgpuslice.so",
            "gpuslice-workload",
            "gpuslice-arbiter",
        ] {
            assert!(
                prof.join(f).exists(),
                "{} missing: cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml \
                 -p gpuslice-interposer -p gpuslice-workloads -p gpuslice-arbiter",
                prof.join(f).display()
            );
        }
        let dir = std::env::temp_dir().join(format!("gs-h8e-{tag}-{}", std::process::id()));
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
            format!(
                "interposer = \"{}\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n\
                 [admission]\ncontext_reserve = \"16Mi\"\n",
                prof.join("libgpuslice.so").display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("arbiter.log")).unwrap();
        let mut c = Command::new(prof.join("gpuslice-arbiter"));
        c.env("GPUSLICE_NVML_LIBRARY", dir.join("lib/libnvidia-ml.so.1"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log);
        Self::env(&mut c, &dir);
        let arbiter = c.spawn().unwrap();
        let t0 = Instant::now();
        let metrics = loop {
            let log = std::fs::read_to_string(dir.join("arbiter.log")).unwrap_or_default();
            if let Some(rest) = log.split("metrics on http://").nth(1) {
                break rest.split('/').next().unwrap().to_string();
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "arbiter log: {log}");
            std::thread::sleep(Duration::from_millis(20));
        };
        while !dir.join("state/arbiter.sock").exists() {
            assert!(t0.elapsed() < Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(20));
        }
        Node {
            dir,
            arbiter,
            metrics,
        }
    }

    fn env(c: &mut Command, dir: &Path) {
        c.env("LD_LIBRARY_PATH", dir.join("lib"))
            .env("GPUSLICE_SIM_STATE", dir.join("sim.state"))
            .env(
                "GPUSLICE_SIM_DEVICES",
                "name=Test GPU 8G,mem=8Gi,sms=16,cc=9.0",
            )
            .env("GPUSLICE_SIM_CTX_OVERHEAD", "0")
            .env("GPUSLICE_STATE_DIR", dir.join("state"))
            .env("GPUSLICE_CONFIG", dir.join("config.toml"))
            .env_remove("LD_PRELOAD");
    }

    fn gpuslice(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpuslice"));
        c.args(args).current_dir(&self.dir);
        Self::env(&mut c, &self.dir);
        c
    }

    fn status(&self) -> serde_json::Value {
        let o = self.gpuslice(&["status", "--json"]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    fn scrape(&self) -> String {
        let mut s = TcpStream::connect(&self.metrics).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.arbiter.kill();
        let _ = self.arbiter.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn workload() -> String {
    profile_dir()
        .join("gpuslice-workload")
        .display()
        .to_string()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn run_status_metrics_and_reclaim_on_the_simulated_gpu() {
    let n = Node::start("all");
    let w = workload();

    // Two saturating tenants, 30/70: the metrics endpoint reports their achieved shares.
    let sat = |compute: &str| {
        n.gpuslice(&[
            "run",
            "--memory",
            "1Gi",
            "--compute",
            compute,
            "--",
            &w,
            "--via",
            "dlsym",
            "saturate",
            "--kernel-us",
            "1000",
            "--seconds",
            "3",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
    };
    let (a, b) = (sat("30"), sat("70"));
    std::thread::sleep(Duration::from_millis(2200));
    let text = n.scrape();
    let status = n.status();
    let slices = status["devices"][0]["slices"].as_array().unwrap().clone();
    assert_eq!(slices.len(), 2, "{status}");
    let share = |guar: u64| -> f64 {
        let id = slices
            .iter()
            .find(|s| s["compute_guaranteed"] == guar)
            .unwrap()["slice_id"]
            .as_str()
            .unwrap()
            .to_string();
        let key = format!(
            "gpuslice_slice_achieved_share_ratio{{slice=\"{id}\",device=\"0\",window=\"1s\"}} "
        );
        let line = text
            .lines()
            .find(|l| l.starts_with(&key))
            .unwrap_or_else(|| panic!("{key} in {text}"));
        line[key.len()..].parse().unwrap()
    };
    let (s30, s70) = (share(30), share(70));
    assert!(s30 > 0.05 && s70 > s30, "achieved 1s: {s30} / {s70}");
    for c in [a, b] {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    }
    wait_for("run slices released", Duration::from_secs(5), || {
        n.status()["devices"][0]["slices"]
            .as_array()
            .unwrap()
            .is_empty()
    });

    // A tenant holding its whole 1Gi cap; status reads it; SIGKILL it and the arbiter gives the
    // memory back while the slice (its gpuslice run) lives on.
    let script = format!(
        "{w} --via dlsym fill --chunk 256Mi --hold-ms 60000 & echo $! > victim; wait; sleep 30"
    );
    let mut holder = n
        .gpuslice(&["run", "--memory", "1Gi", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let used = |n: &Node| n.status()["devices"][0]["slices"][0]["memory_used"].as_u64();
    wait_for("1Gi in use", Duration::from_secs(20), || {
        used(&n) == Some(GI)
    });
    let procs = n.status()["devices"][0]["slices"][0]["processes"].clone();
    assert_eq!(procs.as_array().map(Vec::len), Some(1), "{procs}");
    let victim: i32 = std::fs::read_to_string(n.dir.join("victim"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill on a pid our test's own process tree just started and recorded.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    // The promise is 1 s; loaded test machines get slack.
    wait_for("reclaimed memory", Duration::from_secs(5), || {
        used(&n) == Some(0)
    });
    assert!(n.scrape().contains("gpuslice_reclaimed_processes_total 1"));
    // SAFETY: kill on our own unreaped child.
    unsafe { libc::kill(holder.id() as i32, libc::SIGTERM) };
    let st = holder.wait().unwrap();
    assert_eq!(st.code(), Some(128 + libc::SIGTERM));
}

/// The command of a `gpuslice run` sees only its own slice, where the state directory was: no
/// socket, no other slice, `limits` and `lease` read-only, `usage` writable; another local
/// user cannot even enter the state directory. Needs root (a mount namespace; CI runs as root).
#[test]
fn the_command_sees_only_its_slice_and_other_users_nothing() {
    let n = Node::start("view");
    let state = n.dir.join("state");
    let other = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "ls"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(!other.status.success(), "another user listed the state dir");
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    let script = r#"d="$GPUSLICE_SLICE_DIR"
echo "dir=$d"
ls -A "$d" | tr '\n' ' '; echo
if true > "$d/limits" 2>/dev/null; then echo limits=writable; else echo limits=read-only; fi
if true >> "$d/lease" 2>/dev/null; then echo lease=writable; else echo lease=read-only; fi
if true >> "$d/usage"; then echo usage=writable; fi
"#;
    let o = n
        .gpuslice(&["run", "--memory", "1Gi", "--", "sh", "-c", script])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dir = state.canonicalize().unwrap();
    assert!(out.contains(&format!("dir={}\n", dir.display())), "{out}");
    assert!(
        !out.contains("arbiter.sock"),
        "the socket is visible: {out}"
    );
    assert!(out.contains("limits ") && out.contains("usage "), "{out}");
    assert!(out.contains("limits=read-only"), "{out}");
    assert!(out.contains("lease=read-only"), "{out}");
    assert!(out.contains("usage=writable"), "{out}");
    // The host's view is unchanged.
    assert!(state.join("arbiter.sock").exists());
}

/// Issue 14 item 3: two compute-only `gpuslice run --compute N` slices run beside a capped one
/// on one 8 GiB device. Each is told (`cuMemGetInfo` total) and held to its share of what the
/// capped slice was not promised, and the capped neighbour still gets its whole cap while both
/// hold all of theirs.
#[test]
fn compute_only_slices_share_what_no_capped_slice_was_promised() {
    let n = Node::start("be");
    let w = workload();
    const MI: u64 = 1 << 20;
    let reserve = 16 * MI; // config: context_reserve 16Mi × 1 process
    let share = (8 * GI - (2 * GI + reserve) - 2 * reserve) / 2;

    // The capped slice is admitted first and waits for `go` before filling its cap.
    let capped = n
        .gpuslice(&[
            "run",
            "--memory",
            "2Gi",
            "--",
            "sh",
            "-c",
            &format!(
                "while [ ! -e go ]; do sleep 0.05; done; exec {w} --via dlsym fill --chunk 256Mi"
            ),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let slices = |n: &Node| {
        n.status()["devices"][0]["slices"]
            .as_array()
            .unwrap()
            .clone()
    };
    wait_for("the capped slice", Duration::from_secs(20), || {
        slices(&n).len() == 1
    });
    // Both compute-only slices are admitted before either asks what it has.
    let be = |name: &str, compute: &str| {
        let script = format!(
            "while [ ! -e go-be ]; do sleep 0.05; done; {w} --via dlsym info > {name}.info && \
             exec {w} --via dlsym fill --chunk 8Mi --hold-ms 5000 > {name}.fill"
        );
        n.gpuslice(&["run", "--compute", compute, "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (b30, b70) = (be("c30", "30"), be("c70", "70"));
    wait_for("three slices", Duration::from_secs(20), || {
        slices(&n).len() == 3
    });
    let st = slices(&n);
    let mut caps: Vec<(Option<u64>, Option<u64>, Option<u64>)> = st
        .iter()
        .map(|s| {
            (
                s["compute_guaranteed"].as_u64(),
                s["memory_cap"].as_u64(),
                s["memory_best_effort"].as_u64(),
            )
        })
        .collect();
    caps.sort();
    assert_eq!(
        caps,
        vec![
            (None, Some(2 * GI), None),
            (Some(30), None, Some(share)),
            (Some(70), None, Some(share)),
        ],
        "{st:?}"
    );
    std::fs::write(n.dir.join("go-be"), "").unwrap();
    let read = |f: &str| std::fs::read_to_string(n.dir.join(f)).unwrap_or_default();
    wait_for(
        "both best-effort slices full",
        Duration::from_secs(30),
        || read("c30.fill").contains("allocations=") && read("c70.fill").contains("allocations="),
    );
    // While both hold their whole share, the capped one fills its cap.
    std::fs::write(n.dir.join("go"), "").unwrap();
    let o = capped.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains(&format!(
            "bytes={} refusal=CUDA_ERROR_OUT_OF_MEMORY",
            2 * GI
        )),
        "capped: {out}"
    );
    for (c, name) in [(b30, "c30"), (b70, "c70")] {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let info = read(&format!("{name}.info"));
        assert!(
            info.contains(&format!("meminfo_total={share}\n")),
            "{name}: {info}"
        );
        let fill = read(&format!("{name}.fill"));
        assert!(
            fill.contains(&format!(
                "bytes={share} refusal=CUDA_ERROR_OUT_OF_MEMORY free_after=0 total={share}"
            )),
            "{name}: {fill}"
        );
    }
}
