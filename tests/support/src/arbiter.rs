//! One `gpuslice-arbiter` process for a test, whichever binary it is (this build's in
//! `target/<profile>`, or the dist tree's): its directory `dir` holds `state/` (the state
//! directory, with `arbiter.sock`), `config.toml` and `arbiter.log`. [`crate::SimNode`] runs one
//! on a node of this build; the e2e suites run the dist tree's on theirs.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long [`Arbiter::start`] waits for a `status` answer.
const READY: Duration = Duration::from_secs(30);
/// How long [`Arbiter::stop`] waits after SIGTERM before SIGKILL.
const STOP: Duration = Duration::from_secs(15);

/// An arbiter, started or not; stopped (SIGTERM, then SIGKILL) on drop, its log's tail printed
/// first when the test is panicking.
#[derive(Debug)]
pub struct Arbiter {
    /// The state directory (`--state-dir`, `GPUSLICE_STATE_DIR`).
    pub state_dir: PathBuf,
    /// The configuration file (`--config`, `GPUSLICE_CONFIG`).
    pub config: PathBuf,
    program: PathBuf,
    /// Its directory (`dir` of [`Arbiter::new`]).
    dir: PathBuf,
    log: PathBuf,
    /// Environment of the arbiter beyond what it inherits: `None` removes the variable.
    env: Vec<(OsString, Option<OsString>)>,
    child: Option<Child>,
}

impl Arbiter {
    /// Lays out `dir` for `program` (creating `state/`, writing `config.toml` as a
    /// `state_dir = ...` line followed by `config`); nothing is started yet.
    pub fn new(program: impl Into<PathBuf>, dir: &Path, config: &str) -> std::io::Result<Arbiter> {
        let state_dir = dir.join("state");
        std::fs::create_dir_all(&state_dir)?;
        let file = dir.join("config.toml");
        std::fs::write(
            &file,
            format!("state_dir = \"{}\"\n{config}", state_dir.display()),
        )?;
        Ok(Arbiter {
            state_dir,
            config: file,
            program: program.into(),
            dir: dir.to_path_buf(),
            log: dir.join("arbiter.log"),
            env: Vec::new(),
            child: None,
        })
    }

    /// Sets `key` in the arbiter's environment (for every later start).
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Arbiter {
        self.env
            .push((key.as_ref().into(), Some(value.as_ref().into())));
        self
    }

    /// Sets each pair in the arbiter's environment.
    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        &mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> &mut Arbiter {
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }

    /// Removes `key` from the arbiter's environment.
    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Arbiter {
        self.env.push((key.as_ref().into(), None));
        self
    }

    /// Spawns the arbiter (output appended to `arbiter.log`) and waits until it answers a
    /// `status` request; how long that took. An error, with the log, if it exits first or stays
    /// silent for 30 s.
    pub fn start(&mut self) -> std::io::Result<Duration> {
        let t0 = Instant::now();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut c = Command::new(&self.program);
        c.arg("--state-dir")
            .arg(&self.state_dir)
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        for (k, v) in &self.env {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        let mut child = c.spawn().map_err(|e| {
            std::io::Error::other(format!("starting {}: {e}", self.program.display()))
        })?;
        while self.try_call("{\"version\":1,\"op\":\"status\"}").is_none() {
            let failed = match child.try_wait() {
                Ok(Some(st)) => Some(format!("the arbiter exited ({st})")),
                Ok(None) if t0.elapsed() >= READY => {
                    let _ = child.kill();
                    let _ = child.wait();
                    Some(format!("the arbiter did not answer in {READY:?}"))
                }
                Ok(None) => None,
                Err(e) => Some(format!("waiting for the arbiter: {e}")),
            };
            if let Some(why) = failed {
                return Err(std::io::Error::other(format!(
                    "{why}; log:\n{}",
                    self.log_tail(40)
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.child = Some(child);
        Ok(t0.elapsed())
    }

    /// SIGKILLs the arbiter and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut a) = self.child.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
    }

    /// Stops the arbiter the way systemd does: SIGTERM, up to 15 s, then SIGKILL; reaped.
    pub fn stop(&mut self) {
        let Some(mut a) = self.child.take() else {
            return;
        };
        if let Ok(pid) = libc::pid_t::try_from(a.id()) {
            // SAFETY: `pid` is our own unreaped child, so it names no other process.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let end = Instant::now() + STOP;
        loop {
            match a.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() >= end => {
                    eprintln!("gpuslice-arbiter did not stop on SIGTERM, killing");
                    let _ = a.kill();
                    let _ = a.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// The running arbiter's pid (it may have exited since: not reaped).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The control socket.
    pub fn socket(&self) -> PathBuf {
        self.state_dir.join("arbiter.sock")
    }

    /// One request line and its answer, `None` when the arbiter cannot be reached or answers
    /// garbage (within 10 s).
    pub fn try_call(&self, line: &str) -> Option<serde_json::Value> {
        let mut s = UnixStream::connect(self.socket()).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        writeln!(s, "{line}").ok()?;
        let mut out = String::new();
        BufReader::new(s).read_line(&mut out).ok()?;
        serde_json::from_str(&out).ok()
    }

    /// Sends one request line to the arbiter and returns its answer (panics when there is none).
    pub fn call(&self, line: &str) -> serde_json::Value {
        let mut s = UnixStream::connect(self.socket()).expect("arbiter socket");
        writeln!(s, "{line}").expect("request");
        let mut out = String::new();
        BufReader::new(s).read_line(&mut out).expect("answer");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("answer {out:?}: {e}"))
    }

    /// One request (`line`, a JSON object) and its answer; an error when the arbiter cannot be
    /// reached, answers garbage, or refuses (`"result":"error"`, the answer in the message).
    pub fn request(&self, line: &str) -> std::io::Result<serde_json::Value> {
        let mut s = UnixStream::connect(self.socket())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        writeln!(s, "{line}")?;
        let mut out = String::new();
        BufReader::new(s).read_line(&mut out)?;
        let v: serde_json::Value = serde_json::from_str(&out)
            .map_err(|e| std::io::Error::other(format!("answer {out:?} to {line}: {e}")))?;
        if v["result"] == "error" {
            return Err(std::io::Error::other(format!(
                "the arbiter refused {line}: {}",
                out.trim_end()
            )));
        }
        Ok(v)
    }

    /// Admits slice `id` with `request` (the request's JSON members, without braces); its
    /// slice directory.
    pub fn admit(&self, id: &str, request: &str) -> std::io::Result<PathBuf> {
        self.request(&format!(
            "{{\"version\":1,\"op\":\"admit\",\"slice_id\":\"{id}\",\"request\":{{{request}}}}}"
        ))?;
        Ok(self.state_dir.join(id))
    }

    /// Releases slice `id`; a refusal is ignored (it may be gone already).
    pub fn release(&self, id: &str) {
        let _ = self.request(&format!(
            "{{\"version\":1,\"op\":\"release\",\"slice_id\":\"{id}\"}}"
        ));
    }

    /// Updates slice `id` with `fields` (JSON members).
    pub fn update(&self, id: &str, fields: &str) -> std::io::Result<()> {
        self.request(&format!(
            "{{\"version\":1,\"op\":\"update\",\"slice_id\":\"{id}\",{fields}}}"
        ))
        .map(|_| ())
    }

    /// Has the scheduler write its status every second to `sched-status.json` in the
    /// arbiter's directory (`GPUSLICE_SCHED_STATUS_FILE`, a benchmark switch), for
    /// [`Arbiter::sched_status`]; from the next start.
    pub fn write_sched_status(&mut self) -> &mut Arbiter {
        let file = self.sched_status_file();
        self.env("GPUSLICE_SCHED_STATUS_FILE", file)
    }

    fn sched_status_file(&self) -> PathBuf {
        self.dir.join("sched-status.json")
    }

    /// The scheduler's last status ([`Arbiter::write_sched_status`]; at most 1 s old), `None`
    /// before the first or when it was not asked for.
    pub fn sched_status(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(self.sched_status_file()).ok()?).ok()
    }

    /// What a gpuslice binary needs in its environment to reach this arbiter.
    pub fn client_env(&self) -> Vec<(String, String)> {
        vec![
            (
                "GPUSLICE_STATE_DIR".into(),
                self.state_dir.to_string_lossy().into_owned(),
            ),
            (
                "GPUSLICE_CONFIG".into(),
                self.config.to_string_lossy().into_owned(),
            ),
        ]
    }

    /// The arbiter's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The `host:port` of the metrics endpoint, from the line the arbiter logs at `info` when
    /// it binds; polls the log every 20 ms for `limit` at most, then names what it read.
    pub fn metrics_address(&self, limit: Duration) -> Result<String, String> {
        let t0 = Instant::now();
        loop {
            let log = self.log();
            if let Some(rest) = log.split("metrics on http://").nth(1) {
                return Ok(rest.split('/').next().unwrap_or_default().to_string());
            }
            if t0.elapsed() >= limit {
                return Err(format!(
                    "the arbiter logged no metrics address in {limit:?}; log:\n{log}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        crate::tail_lines(&self.log(), n)
    }
}

impl Drop for Arbiter {
    fn drop(&mut self) {
        if self.child.is_some() && std::thread::panicking() {
            eprintln!("--- gpuslice-arbiter log (tail)\n{}", self.log_tail(30));
        }
        self.stop();
    }
}
