//! Test helpers: per-test state files, and child processes running a mode of this test binary.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};

use gpuslice_sim_core::{now_ns, sleep_until, Node, SimConfig};

/// [`small_env`] with the engine in `mode` (`kernel` or `timeslice`).
pub fn engine_env(test: &str, mode: &str) -> HashMap<String, String> {
    let mut m = small_env(&format!("{test}-{mode}"));
    m.insert("GPUSLICE_SIM_ENGINE".into(), mode.into());
    m
}

/// Environment of a test node: a private state file plus the given variables.
pub fn env_for(test: &str, vars: &[(&str, &str)]) -> HashMap<String, String> {
    let path: PathBuf = std::env::temp_dir().join(format!(
        "gpuslice-sim-test-{}-{test}.state",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let mut m: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    m.insert(
        "GPUSLICE_SIM_STATE".into(),
        path.to_string_lossy().into_owned(),
    );
    m
}

/// A node of one 1 GiB device with free contexts, for test `test`.
pub fn small_env(test: &str) -> HashMap<String, String> {
    env_for(
        test,
        &[
            ("GPUSLICE_SIM_DEVICES", "name=Test GPU,mem=1Gi,sms=4,cc=8.0"),
            ("GPUSLICE_SIM_CTX_OVERHEAD", "0"),
        ],
    )
}

pub fn config(env: &HashMap<String, String>) -> SimConfig {
    SimConfig::from_lookup(|k| env.get(k).cloned()).expect("test config parses")
}

pub fn open(env: &HashMap<String, String>) -> Node {
    Node::open(config(env)).expect("node opens")
}

/// A child process of this test binary running `child_main` in `mode`.
pub struct ChildProc {
    pub child: Child,
    pub out: BufReader<ChildStdout>,
}

impl ChildProc {
    pub fn spawn(env: &HashMap<String, String>, mode: &str, extra: &[(&str, String)]) -> Self {
        let exe = std::env::current_exe().expect("current exe");
        Self::spawn_with(Command::new(exe), env, mode, extra)
    }

    /// Like [`ChildProc::spawn`], as pid 1 of a new pid namespace with its own `/proc` (what a
    /// container's init sees), through util-linux `unshare`, which dies with it and kills it when
    /// killed. Without root, inside a new user namespace too (where root maps to the caller).
    pub fn spawn_in_pid_namespace(
        env: &HashMap<String, String>,
        mode: &str,
        extra: &[(&str, String)],
    ) -> Self {
        let exe = std::env::current_exe().expect("current exe");
        let mut cmd = Command::new("unshare");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            cmd.args(["--user", "--map-root-user"]);
        }
        cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
            .arg(exe);
        Self::spawn_with(cmd, env, mode, extra)
    }

    fn spawn_with(
        mut cmd: Command,
        env: &HashMap<String, String>,
        mode: &str,
        extra: &[(&str, String)],
    ) -> Self {
        cmd.args(["child_main", "--exact", "--nocapture", "--test-threads=1"])
            .env("GPUSLICE_SIM_TEST_CHILD", mode)
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn child");
        let out = BufReader::new(child.stdout.take().expect("child stdout"));
        ChildProc { child, out }
    }

    /// Next line starting with `@`, without the marker (test harness lines are skipped).
    pub fn line(&mut self) -> String {
        loop {
            let mut l = String::new();
            let n = self.out.read_line(&mut l).expect("read child");
            assert!(n > 0, "child exited before reporting");
            // the harness may prefix the line with "test child_main ... "
            if let Some(i) = l.find('@') {
                return l[i + 1..].trim().to_string();
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The host pid of the process `unshare` forked (the child of [`Self::pid`]).
    pub fn inner_pid(&self) -> u32 {
        let pid = self.pid();
        let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .expect("read unshare's children");
        kids.split_ascii_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("unshare has forked its child")
    }

    /// Closes the child's stdin (its cue to exit) and waits for it.
    pub fn finish(mut self) -> bool {
        drop(self.child.stdin.take());
        self.child.wait().expect("wait child").success()
    }

    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Blocks until stdin is closed (the parent's cue).
pub fn wait_stdin_eof() {
    let mut s = String::new();
    while std::io::stdin()
        .read_line(&mut s)
        .map(|n| n > 0)
        .unwrap_or(false)
    {}
}

/// Entry point of child processes: runs the mode named by `GPUSLICE_SIM_TEST_CHILD` (a no-op
/// in the normal test run, where it is unset).
pub fn child_main() {
    let Ok(mode) = std::env::var("GPUSLICE_SIM_TEST_CHILD") else {
        return;
    };
    let node = Node::open(SimConfig::from_env().expect("child config")).expect("child node");
    let arg = |k: &str| -> u64 {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    match mode.as_str() {
        // allocate `chunk` bytes until OOM, report the count, hold until stdin closes
        "alloc_until_oom" => {
            let chunk = arg("CHUNK");
            sleep_until(arg("START_AT"));
            let mut n = 0u64;
            while node.mem_alloc(0, chunk).is_ok() {
                n += 1;
            }
            println!("@{n}");
            wait_stdin_eof();
        }
        // allocate `bytes`, report own pid, hold
        "hold" => {
            node.ctx_attach(0).expect("ctx");
            node.mem_alloc(0, arg("BYTES")).expect("alloc");
            println!("@ready {}", std::process::id());
            wait_stdin_eof();
        }
        // what a monitor in this namespace sees: reaped slots, memory in use, listed pids
        "reader" => {
            let reaped = node.reap_dead();
            let used = node.mem_used(0);
            let pids: Vec<String> = node
                .processes(0)
                .iter()
                .map(|p| p.pid.to_string())
                .collect();
            println!("@{reaped} {used} {}", pids.join(","));
            wait_stdin_eof();
        }
        // back-to-back kernels of KERNEL_NS from START_AT for RUN_NS; report first start,
        // last end, own busy time and the shortest and longest start-to-end span of a kernel
        "saturate" => {
            node.ctx_attach(0).expect("ctx");
            let (k, start_at, run) = (arg("KERNEL_NS"), arg("START_AT"), arg("RUN_NS"));
            println!("@ready");
            sleep_until(start_at);
            let (mut first, mut last) = (u64::MAX, 0);
            let (mut min_span, mut max_span) = (u64::MAX, 0);
            while now_ns() < start_at + run {
                let t = node.engine_execute(0, k);
                first = first.min(t.start_ns);
                last = last.max(t.end_ns);
                min_span = min_span.min(t.end_ns - t.start_ns);
                max_span = max_span.max(t.end_ns - t.start_ns);
            }
            let busy = node.process_busy_ns(0, std::process::id());
            println!("@{first} {last} {busy} {min_span} {max_span}");
            wait_stdin_eof();
        }
        other => panic!("unknown child mode {other}"),
    }
}
