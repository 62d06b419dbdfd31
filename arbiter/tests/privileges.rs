//! Least privilege, checked on the real binary (root only): started as root against the
//! simulated NVML, `gpuslice-arbiter` holds no capability in any set and has `no_new_privs`,
//! yet still admits over its socket and reclaims the slice of a process of another user once it
//! dies (`/proc` reads and pidfds need no capability). With `[scheduler] realtime_priority` it
//! keeps `CAP_SYS_NICE` as well, and the device scheduler thread runs under `SCHED_FIFO`.
//! `docs/privileges.md`.
//!
//! Needs root and the simulated NVML (`cargo build -p gpuslice-sim-nvml`, found next to the
//! binary or at `GPUSLICE_TEST_SIM_NVML`). Without them the test is skipped with a message, and
//! fails when `CI=true`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod threads;
use threads::{policy_of, thread_of};

const BIN: &str = env!("CARGO_BIN_EXE_gpuslice-arbiter");

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn skip(why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("privileges test cannot run under CI: {why}");
    }
    eprintln!("SKIPPED privileges test: {why}");
}

fn sim_nvml() -> Option<PathBuf> {
    std::env::var_os("GPUSLICE_TEST_SIM_NVML")
        .map(PathBuf::from)
        .or_else(|| Some(Path::new(BIN).parent()?.join("libnvidia_ml.so")))
        .filter(|p| p.is_file())
}

fn call(sock: &Path, line: &str) -> serde_json::Value {
    let mut s = UnixStream::connect(sock).unwrap();
    writeln!(s, "{line}").unwrap();
    let mut out = String::new();
    BufReader::new(s).read_line(&mut out).unwrap();
    serde_json::from_str(&out).unwrap()
}

fn status_field(pid: u32, key: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

/// Root and the built simulated NVML (else a loud skip and `None`), and a fresh scratch
/// directory named by `tag`: what every test here starts from.
fn root_and_sim(tag: &str) -> Option<(PathBuf, PathBuf)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("not running as root");
        return None;
    }
    let Some(lib) = sim_nvml() else {
        skip("the simulated NVML is not built (cargo build -p gpuslice-sim-nvml)");
        return None;
    };
    let dir = std::env::temp_dir().join(format!("gs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Some((lib, dir))
}

/// Starts the arbiter on the simulated NVML `lib` (its state file in `dir`) with `state` as
/// state directory and `config`, and waits (60 s at most) for its control socket.
fn start_arbiter(state: &Path, config: &Path, lib: &Path, dir: &Path) -> Kill {
    let d = Kill(
        Command::new(BIN)
            .arg("--state-dir")
            .arg(state)
            .arg("--config")
            .arg(config)
            .env("GPUSLICE_NVML_LIBRARY", lib)
            .env("GPUSLICE_SIM_STATE", dir.join("sim-state"))
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let sock = state.join("arbiter.sock");
    let deadline = Instant::now() + Duration::from_secs(60);
    while UnixStream::connect(&sock).is_err() {
        assert!(Instant::now() < deadline, "arbiter did not open its socket");
        std::thread::sleep(Duration::from_millis(50));
    }
    d
}

#[test]
fn arbiter_as_root_keeps_no_capability_and_still_works() {
    let Some((lib, dir)) = root_and_sim("h15-priv") else {
        return;
    };
    let sock = dir.join("arbiter.sock");
    let d = start_arbiter(&dir, Path::new("/dev/null"), &lib, &dir);
    let pid = d.0.id();
    // CAP_SYS_PTRACE (bit 19): reclaim reads /proc/<pid>/ns/pid of tenant processes;
    // CAP_KILL (bit 5): the backstop's default memory action is kill.
    let kept = (1u64 << 19) | (1 << 5);
    for (set, want) in [
        ("CapEff:", kept),
        ("CapPrm:", kept),
        ("CapBnd:", kept),
        ("CapInh:", 0),
        ("CapAmb:", 0),
    ] {
        assert_eq!(
            u64::from_str_radix(&status_field(pid, set), 16).unwrap(),
            want,
            "{set} of the arbiter (docs/privileges.md: CAP_SYS_PTRACE and CAP_KILL kept)"
        );
    }
    assert_eq!(status_field(pid, "NoNewPrivs:"), "1");

    let r = call(
        &sock,
        r#"{"version":1,"op":"admit","slice_id":"p1","request":{"memory":"1Gi"}}"#,
    );
    assert_eq!(r["result"], "admitted", "{r}");
    // A process of another user, bound as the slice's owner: reclaim must see it die.
    let sleeper = Kill(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["sleep", "600"])
            .spawn()
            .expect("setpriv (util-linux)"),
    );
    let r = call(
        &sock,
        &format!(
            r#"{{"version":1,"op":"bind","slice_id":"p1","pid":{}}}"#,
            sleeper.0.id()
        ),
    );
    assert_eq!(r["result"], "bound", "{r}");
    std::thread::sleep(Duration::from_millis(500));
    let r = call(&sock, r#"{"version":1,"op":"status"}"#);
    assert_eq!(
        r["slices"].as_array().unwrap().len(),
        1,
        "a live owner keeps the slice: {r}"
    );
    drop(sleeper);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = call(&sock, r#"{"version":1,"op":"status"}"#);
        if r["slices"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reclaim did not release the slice of a dead process: {r}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(d);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn realtime_priority_keeps_cap_sys_nice_and_the_device_thread_runs_sched_fifo() {
    let Some((lib, dir)) = root_and_sim("rt-priv") else {
        return;
    };
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[scheduler]\nrealtime_priority = 7\n[metrics]\nenabled = false\n",
    )
    .unwrap();
    let state = dir.join("state");
    let sock = state.join("arbiter.sock");
    let d = start_arbiter(&state, &config, &lib, &dir);
    let pid = d.0.id();
    // CAP_SYS_NICE is bit 23, kept beside CAP_SYS_PTRACE and CAP_KILL.
    let kept = (1u64 << 19) | (1 << 5) | (1 << 23);
    for set in ["CapEff:", "CapPrm:", "CapBnd:"] {
        assert_eq!(
            u64::from_str_radix(&status_field(pid, set), 16).unwrap(),
            kept,
            "{set} of the arbiter with realtime_priority (CAP_SYS_NICE kept)"
        );
    }
    assert_eq!(status_field(pid, "NoNewPrivs:"), "1");
    // A slice starts device 0's scheduler thread, which puts itself under SCHED_FIFO 7.
    let r = call(
        &sock,
        r#"{"version":1,"op":"admit","slice_id":"rt1","request":{"memory":"1Gi","compute":30}}"#,
    );
    assert_eq!(r["result"], "admitted", "{r}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let (policy, prio) = loop {
        if let Some(tid) = thread_of(pid, "sched-gpu0") {
            let got = policy_of(tid);
            if got.0 == libc::SCHED_FIFO || Instant::now() > deadline {
                break got;
            }
        }
        assert!(Instant::now() < deadline, "no sched-gpu0 thread in {pid}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        (policy, prio),
        (libc::SCHED_FIFO, 7),
        "device 0's scheduler thread"
    );
    drop(d);
    let _ = std::fs::remove_dir_all(dir);
}
