//! The arbiter's backstop on the simulated GPU, end to end: tenants that bypass the interposer
//! (`env -u LD_PRELOAD` under `gpuslice run`, then the driver linked with `-lcuda`) while their
//! slice is registered with the arbiter.
//!
//! * memory, action `kill` (default): a 256 MiB slice whose process allocates 1 GiB is SIGKILLed;
//!   the time from its allocation to its death is printed (goal: within 1 s);
//! * memory, action `log`: the same process is only logged and counted, and runs to its end;
//! * memory, action `freeze` (root only): a slice bound to a cgroup is frozen by the cgroup
//!   freezer (v1 `freezer.state` or v2 `cgroup.freeze`);
//! * lease: a bypassing process that launches kernels while an interposed slice holds the lease
//!   is flagged (action `log`).
//!
//! Every action shows in `gpuslice status` (table and `--json`) and in the metrics.
//! Needs the same builds as `e2e_sim.rs`, plus `gpuslice-workload-linked`.

mod common;

use common::Node;
use gpuslice_test_support::wait::{wait_exit, wait_line};
use gpuslice_test_support::{profile_dir, NodeConfig};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// 1.5 GiB: a 1 GiB chunk fits once, so a bypassing `fill --chunk 1Gi` holds exactly 1 GiB.
const DEVICES: &str = "name=Test GPU 1.5G,mem=1536Mi,sms=16,cc=9.0";

impl Node {
    /// The node with the given `[backstop]` settings.
    fn start(tag: &str, backstop: &str) -> Node {
        Node::with(
            &format!("bs-{tag}"),
            NodeConfig {
                devices: DEVICES.into(),
                config: format!(
                    "[admission]\ncontext_reserve = \"16Mi\"\nmodule_allowance = \"0\"\n[backstop]\n{backstop}\n"
                ),
                metrics: true,
                needs: vec!["gpuslice-workload", "gpuslice-workload-linked"],
                ..NodeConfig::default()
            },
        )
    }

    /// `gpuslice run <run_args> -- env -u LD_PRELOAD gpuslice-workload-linked <args>`: the
    /// slice is registered, the process bypasses the interposer.
    fn bypassing(&self, run_args: &[&str], args: &[&str]) -> Child {
        let linked = profile_dir().join("gpuslice-workload-linked");
        let mut a: Vec<&str> = vec!["run"];
        a.extend_from_slice(run_args);
        a.extend_from_slice(&["--", "env", "-u", "LD_PRELOAD", linked.to_str().unwrap()]);
        a.extend_from_slice(&["--via", "link"]);
        a.extend_from_slice(args);
        self.gpuslice(&a)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn status_table(&self) -> String {
        let o = self.gpuslice(&["status"]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    }
}

fn events(status: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for d in status["devices"].as_array().unwrap() {
        for s in d["slices"].as_array().unwrap() {
            if let Some(ev) = s["backstop"].as_array() {
                out.extend(ev.iter().cloned());
            }
        }
    }
    out
}

#[test]
fn a_bypassing_tenant_over_its_cap_is_killed_within_a_second() {
    let n = Node::start("kill", "memory_action = \"kill\"");
    // A 256 MiB slice; the process allocates 1 GiB (one chunk fits the 1.5 GiB device) and holds.
    let mut c = n.bypassing(
        &["--memory", "256Mi"],
        &["fill", "--chunk", "1Gi", "--hold-ms", "30000"],
    );
    let (allocated, line) = wait_line(&mut c, "allocations=", Duration::from_secs(60));
    let Some((died, st)) = wait_exit(&mut c, Duration::from_secs(20)) else {
        let _ = c.kill();
        panic!("not contained within 20 s; arbiter log:\n{}", n.log());
    };
    let took = died.duration_since(allocated);
    println!("backstop: contained {line} in {took:?} (goal: within 1 s)");
    assert!(
        !st.success(),
        "the tenant must have been killed, exit {st:?}"
    );
    // Generous bound for a loaded 2-core machine; the figure above is the measurement.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let log = n.log();
    assert!(
        log.contains("backstop: slice") && log.contains("killed pid"),
        "log:\n{log}"
    );
    let text = n.scrape();
    assert!(
        text.lines()
            .any(|l| l
                .starts_with("gpuslice_backstop_actions_total{kind=\"memory\",action=\"kill\"} 1")),
        "{text}"
    );
}

/// A bypassing process that double-forks away from the command (its parent exits, so it is
/// re-parented) is still a descendant of the slice's owner, `gpuslice run`, its subreaper: the
/// backstop attributes it and kills it while the command runs on.
#[test]
fn a_double_forked_bypassing_child_is_still_attributed_and_killed() {
    let n = Node::start("dfork", "memory_action = \"kill\"");
    let linked = profile_dir().join("gpuslice-workload-linked");
    let pid_file = n.dir.join("orphan.pid");
    let script = format!(
        "(env -u LD_PRELOAD {} --via link fill --chunk 1Gi --hold-ms 30000 >/dev/null 2>&1 & \
         echo $! > {}); sleep 30",
        linked.display(),
        pid_file.display()
    );
    let mut c = n
        .gpuslice(&["run", "--memory", "256Mi", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let orphan: u32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break p;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no orphan pid");
        std::thread::sleep(Duration::from_millis(20));
    };
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z"))
    };
    let t0 = Instant::now();
    while alive(orphan) && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let survived = alive(orphan);
    let command_running = c.try_wait().unwrap().is_none();
    let _ = c.kill();
    let _ = c.wait();
    assert!(
        !survived,
        "the double-forked child {orphan} held 1 GiB under a 256 MiB cap for 20 s; log:\n{}",
        n.log()
    );
    assert!(
        command_running,
        "the command itself must still run: only the child was over"
    );
    let log = n.log();
    assert!(log.contains(&format!("killed pid {orphan}")), "log:\n{log}");
}

#[test]
fn with_action_log_the_tenant_is_only_logged_and_counted() {
    let n = Node::start("log", "memory_action = \"log\"");
    let mut c = n.bypassing(
        &["--memory", "256Mi"],
        &["fill", "--chunk", "1Gi", "--hold-ms", "2500"],
    );
    wait_line(&mut c, "allocations=", Duration::from_secs(60));
    // Within the hold the event shows in status (JSON and table) and the metrics.
    let t0 = Instant::now();
    let ev = loop {
        let ev = events(&n.status_json());
        if !ev.is_empty() {
            break ev;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no event; log:\n{}",
            n.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ev[0]["kind"], "memory");
    assert_eq!(ev[0]["action"], "log");
    let msg = ev[0]["message"].as_str().unwrap();
    assert!(msg.starts_with("logged pid "), "{msg}");
    assert!(msg.contains("1 GiB > cap 256 MiB"), "{msg}");
    let table = n.status_table();
    assert!(table.contains(": backstop: logged pid "), "{table}");
    let text = n.scrape();
    assert!(
        text.lines().any(
            |l| l.starts_with("gpuslice_slice_backstop_actions_total{slice=")
                && l.contains("kind=\"memory\",action=\"log\"} 1")
        ),
        "{text}"
    );
    // Not killed: it runs to its end.
    let (_, st) = wait_exit(&mut c, Duration::from_secs(30)).expect("tenant ran on");
    assert!(st.success(), "exit {st:?}");
}

fn cgroup_v2() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

#[test]
fn freeze_uses_the_cgroup_freezer_as_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED freeze test: not root (the cgroup freezer needs root)");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root: the freeze test must not be skipped"
        );
        return;
    }
    let n = Node::start("freeze", "memory_action = \"freeze\"");
    let name = format!("gs-backstop-test-{}", std::process::id());
    // The cgroup the "container" lives in: freezer + pids (v1), or one directory (v2).
    let dirs: Vec<PathBuf> = if cgroup_v2() {
        vec![PathBuf::from("/sys/fs/cgroup").join(&name)]
    } else {
        vec![
            PathBuf::from("/sys/fs/cgroup/freezer").join(&name),
            PathBuf::from("/sys/fs/cgroup/pids").join(&name),
        ]
    };
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    let linked = profile_dir().join("gpuslice-workload-linked");
    let mut cmd = Command::new(&linked);
    cmd.args([
        "--via",
        "link",
        "fill",
        "--chunk",
        "1Gi",
        "--hold-ms",
        "30000",
    ])
    .stdout(Stdio::piped());
    n.env(&mut cmd);
    let procs: Vec<PathBuf> = dirs.iter().map(|d| d.join("cgroup.procs")).collect();
    // SAFETY: the closure only writes to files with raw syscalls-level std calls before exec;
    // the child is single-threaded at that point.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            for p in &procs {
                std::fs::write(p, "0")?;
            }
            Ok(())
        });
    }
    let mut c = cmd.spawn().unwrap();
    let pid = c.id();
    let r = n.call(&format!(
        r#"{{"version":1,"op":"admit","slice_id":"frz","request":{{"memory":"256Mi"}},"owner":{{"pid":{pid},"cgroup":"/{name}"}}}}"#
    ));
    assert_eq!(r["result"], "admitted", "{r}");
    wait_line(&mut c, "allocations=", Duration::from_secs(60));
    let state_file = if cgroup_v2() {
        dirs[0].join("cgroup.freeze")
    } else {
        dirs[0].join("freezer.state")
    };
    let t0 = Instant::now();
    loop {
        let s = std::fs::read_to_string(&state_file).unwrap_or_default();
        if s.trim() == "FROZEN" || s.trim() == "1" {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "not frozen ({s}); log:\n{}",
            n.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "backstop: froze cgroup /{name} within {:?} of the check start",
        t0.elapsed()
    );
    assert!(c.try_wait().unwrap().is_none(), "frozen, not killed");
    let ev = events(&n.status_json());
    assert!(
        ev.iter()
            .any(|e| e["action"] == "freeze" && e["slice_id"] == "frz"),
        "{ev:?}"
    );
    // Thaw, end and clean up.
    let thaw = if cgroup_v2() { "0" } else { "THAWED" };
    let _ = c.kill();
    std::fs::write(&state_file, thaw).unwrap();
    let _ = c.wait();
    let _ = n.call(r#"{"version":1,"op":"release","slice_id":"frz"}"#);
    for d in &dirs {
        let t0 = Instant::now();
        while std::fs::remove_dir(d).is_err() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn launching_without_the_lease_is_flagged() {
    let n = Node::start(
        "lease",
        "lease_action = \"log\"\nlease_tolerance = \"150ms\"",
    );
    let w = profile_dir().join("gpuslice-workload");
    // An interposed tenant that takes leases, and a bypassing one that never asks for them.
    let mut good = n
        .gpuslice(&[
            "run",
            "--memory",
            "256Mi",
            "--compute",
            "50",
            "--",
            w.to_str().unwrap(),
            "--via",
            "dlsym",
            "saturate",
            "--kernel-us",
            "2000",
            "--seconds",
            "6",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut bad = n.bypassing(
        &["--memory", "256Mi", "--compute", "50"],
        &["saturate", "--kernel-us", "2000", "--seconds", "6"],
    );
    let t0 = Instant::now();
    let ev = loop {
        let ev: Vec<_> = events(&n.status_json())
            .into_iter()
            .filter(|e| e["kind"] == "lease")
            .collect();
        if !ev.is_empty() {
            break ev;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "no lease event; log:\n{}",
            n.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    println!(
        "backstop: launch without lease flagged {:?} after both started: {}",
        t0.elapsed(),
        ev[0]["message"]
    );
    assert_eq!(ev.len(), 1, "only the bypassing slice is flagged: {ev:?}");
    assert_eq!(ev[0]["action"], "log");
    let bad_pid = ev[0]["pids"][0].as_u64().unwrap() as u32;
    // The flagged process is the bypassing workload (a child of `env` under `gpuslice run`).
    let cmdline = std::fs::read(format!("/proc/{bad_pid}/cmdline")).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("gpuslice-workload-linked"),
        "pid {bad_pid}: {}",
        String::from_utf8_lossy(&cmdline)
    );
    let _ = good.wait();
    let _ = bad.wait();
}

/// `processes=[(pid, used), …]` from `gpuslice-workload info`.
fn nvml_pids(out: &str) -> Vec<u32> {
    let line = out
        .lines()
        .find(|l| l.starts_with("nvml_device=0 "))
        .unwrap_or_else(|| panic!("no nvml_device line in {out}"));
    let list = line.split("processes=").nth(1).unwrap();
    list.split('(')
        .skip(1)
        .map(|p| p.split(',').next().unwrap().trim().parse().unwrap())
        .collect()
}

#[test]
fn nvml_process_lists_inside_a_slice_show_only_its_own_processes() {
    let n = Node::start("nvml", "memory_action = \"log\"");
    let w = profile_dir().join("gpuslice-workload");
    // Another tenant holding memory on the device.
    let mut other = n
        .gpuslice(&[
            "run",
            "--memory",
            "512Mi",
            "--",
            w.to_str().unwrap(),
            "--via",
            "dlsym",
            "fill",
            "--chunk",
            "128Mi",
            "--hold-ms",
            "20000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_line(&mut other, "allocations=", Duration::from_secs(60));
    // Outside any slice (no interposer), NVML lists the other tenant and the caller.
    let mut plain = Command::new(&w);
    plain.args(["--via", "dlsym", "info"]);
    n.env(&mut plain);
    let o = plain.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{out}");
    let all = nvml_pids(&out);
    assert!(
        all.len() >= 2,
        "without the interposer every process shows: {out}"
    );
    // In a slice: only its own process.
    let o = n
        .gpuslice(&[
            "run",
            "--memory",
            "256Mi",
            "--",
            w.to_str().unwrap(),
            "--via",
            "dlsym",
            "info",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{out}");
    let mine = nvml_pids(&out);
    assert_eq!(mine.len(), 1, "only the slice's own process: {out}");
    // The other tenant's process (from its usage record, as `status` reports it) is listed
    // outside and hidden inside.
    let st = n.status_json();
    let theirs: Vec<u32> = st["devices"][0]["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["processes"].as_array())
        .flatten()
        .filter_map(|p| p.as_u64())
        .map(|p| p as u32)
        .collect();
    assert!(!theirs.is_empty(), "{st}");
    for p in &theirs {
        assert!(all.contains(p), "{p} in {all:?}");
        assert!(!mine.contains(p), "{p} leaked into {mine:?}");
    }
    let _ = other.kill();
    let _ = other.wait();
}
