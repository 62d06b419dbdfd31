//! A daemon a test started: its log file, readiness wait, and a stop (by its own PID, then any
//! descendant whose command line mentions the daemon's private directory) when dropped —
//! also when the test panics.

use crate::procs;
use anyhow::{bail, Context, Result};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running daemon.
#[derive(Debug)]
pub struct Daemon {
    name: String,
    child: Option<Child>,
    log: PathBuf,
    marker: PathBuf,
}

impl Daemon {
    /// Spawn `cmd` with stdout and stderr to `log`. `marker` is a directory only this daemon and
    /// its helpers use: on stop, descendants mentioning it in their command line are stopped too.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path, marker: &Path) -> Result<Self> {
        procs::become_subreaper();
        let f =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let f2 = f.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(f2)
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        Ok(Self {
            name: name.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
            marker: marker.to_path_buf(),
        })
    }

    /// The daemon's PID.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        gpuslice_test_support::tail_lines(&self.log(), n)
    }

    /// Wait until a unix socket at `sock` accepts connections.
    pub fn wait_socket(&mut self, sock: &Path, timeout: Duration) -> Result<()> {
        let end = Instant::now() + timeout;
        loop {
            if UnixStream::connect(sock).is_ok() {
                return Ok(());
            }
            if let Some(c) = self.child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    bail!(
                        "{} exited ({st}) before {} was ready; log:\n{}",
                        self.name,
                        sock.display(),
                        self.log_tail(40)
                    );
                }
            }
            if Instant::now() >= end {
                bail!(
                    "{} not ready on {} after {timeout:?}; log:\n{}",
                    self.name,
                    sock.display(),
                    self.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop now: SIGTERM, up to 15 s, SIGKILL; then the helpers it left (by marker).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = c.id() as i32;
            procs::signal(pid, libc::SIGTERM);
            let end = Instant::now() + Duration::from_secs(15);
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= end => {
                        eprintln!("{}: did not stop on SIGTERM, killing", self.name);
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        procs::stop_descendants_mentioning(&self.marker, Duration::from_secs(5));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- {} log (tail)\n{}", self.name, self.log_tail(30));
        }
        self.stop();
    }
}
