//! Test helpers: per-test state files, and child processes running a mode of this test binary.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};

use gpuslice_sim_core::{Node, SimConfig};

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
        let mut cmd = Command::new(exe);
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
