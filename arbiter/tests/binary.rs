//! The `gpuslice-arbiter` binary: refuses clearly without a usable config or NVML, and — with the
//! simulated NVML (`GPUSLICE_TEST_SIM_NVML` = path to the simulator's `libnvidia-ml.so.1`) —
//! serves the protocol and survives being killed and restarted.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_gpuslice-arbiter");

fn tmp(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("gs-h5b-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

#[test]
fn missing_explicit_config_is_an_error() {
    let dir = tmp("cfg");
    let out = Command::new(BIN)
        .args([
            "--state-dir",
            dir.to_str().unwrap(),
            "--config",
            "/nonexistent/gs.toml",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read config /nonexistent/gs.toml"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unknown_config_key_is_named() {
    let dir = tmp("key");
    let cfg = dir.join("c.toml");
    std::fs::write(&cfg, "[admission]\nplacment = \"spread\"\n").unwrap();
    let out = Command::new(BIN)
        .env("GPUSLICE_CONFIG", &cfg)
        .env("GPUSLICE_STATE_DIR", &dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("placment"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn no_nvml_is_an_error() {
    let dir = tmp("nvml");
    let out = Command::new(BIN)
        .args(["--state-dir", dir.to_str().unwrap()])
        .env("GPUSLICE_CONFIG", dir.join("absent-but-explicit.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let out = Command::new(BIN)
        .args([
            "--state-dir",
            dir.to_str().unwrap(),
            "--config",
            "/dev/null",
        ])
        .env("GPUSLICE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot initialise NVML from /nonexistent/libnvidia-ml.so.1"),
        "{err}"
    );
    assert!(!dir.join("arbiter.sock").exists());
    let _ = std::fs::remove_dir_all(dir);
}

struct Daemon(Child);
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(lib: &Path, dir: &Path) -> Daemon {
    let child = Command::new(BIN)
        .args([
            "--state-dir",
            dir.to_str().unwrap(),
            "--config",
            "/dev/null",
        ])
        .env("GPUSLICE_NVML_LIBRARY", lib)
        .env("GPUSLICE_SIM_STATE", dir.join("sim-state"))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut d = Daemon(child);
    let sock = dir.join("arbiter.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    while UnixStream::connect(&sock).is_err() {
        assert!(d.0.try_wait().unwrap().is_none(), "arbiter exited early");
        assert!(
            Instant::now() < deadline,
            "arbiter did not open its socket in 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d
}

fn call(sock: &Path, line: &str) -> serde_json::Value {
    let mut s = UnixStream::connect(sock).unwrap();
    writeln!(s, "{line}").unwrap();
    let mut out = String::new();
    BufReader::new(s).read_line(&mut out).unwrap();
    serde_json::from_str(&out).unwrap()
}

#[test]
#[ignore = "needs the simulated NVML: set GPUSLICE_TEST_SIM_NVML to its libnvidia-ml.so.1"]
fn daemon_on_simulated_nvml_survives_restart() {
    let lib = PathBuf::from(
        std::env::var_os("GPUSLICE_TEST_SIM_NVML").expect("GPUSLICE_TEST_SIM_NVML is not set"),
    );
    let dir = tmp("sim");
    let sock = dir.join("arbiter.sock");
    let mut d = spawn(&lib, &dir);
    let r = call(
        &sock,
        r#"{"version":1,"op":"admit","slice_id":"s1","request":{"memory":"1Gi","compute":40}}"#,
    );
    assert_eq!(r["result"], "admitted", "{r}");
    let r = call(
        &sock,
        r#"{"version":1,"op":"admit","slice_id":"s2","request":{"memory":"1Gi","model":"no-such-gpu"}}"#,
    );
    assert_eq!(r["code"], "refused", "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("model \"no-such-gpu\""),
        "{r}"
    );
    let r = call(
        &sock,
        r#"{"version":1,"op":"update","slice_id":"s1","memory":"2Gi","compute":20}"#,
    );
    assert_eq!(r["result"], "updated", "{r}");
    // Kill without warning and start again: the slice is still there, updated.
    d.0.kill().unwrap();
    d.0.wait().unwrap();
    drop(d);
    let _d = spawn(&lib, &dir);
    let r = call(&sock, r#"{"version":1,"op":"status"}"#);
    let slices = r["slices"].as_array().unwrap();
    assert_eq!(slices.len(), 1, "{r}");
    assert_eq!(slices[0]["slice_id"], "s1");
    assert_eq!(slices[0]["request"]["compute"], 20);
    assert_eq!(slices[0]["devices"][0]["memory_cap"], 2u64 << 30);
    let r = call(&sock, r#"{"version":1,"op":"release","slice_id":"s1"}"#);
    assert_eq!(r["result"], "released", "{r}");
    let _ = std::fs::remove_dir_all(dir);
}
