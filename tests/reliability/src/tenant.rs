//! A tenant process started by a trial: stdin for commands, stdout read line by line on a thread
//! (so a trial can wait for a line with a bound), SIGKILL by its own pid, reaping with a bound.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running tenant.
pub struct Tenant {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every line read so far.
    pub output: Vec<String>,
}

impl Tenant {
    /// Spawns `c` with piped stdin/stdout (stderr inherited: the interposer's messages show).
    pub fn spawn(mut c: Command) -> Result<Tenant> {
        c.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = c.spawn().context("spawning a tenant")?;
        let stdin = child.stdin.take();
        let out = child.stdout.take().context("tenant stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Ok(Tenant {
            child,
            stdin,
            lines,
            output: Vec::new(),
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (at most `limit`) for a line starting with `prefix`; returns it.
    pub fn expect(&mut self, prefix: &str, limit: Duration) -> Result<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.output.push(l.clone());
                    if l.starts_with(prefix) {
                        return Ok(l);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => bail!(
                    "tenant {} gave no {prefix:?} line within {limit:?}; output: {:?}",
                    self.pid(),
                    self.output
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => bail!(
                    "tenant {} closed its output without a {prefix:?} line; output: {:?}",
                    self.pid(),
                    self.output
                ),
            }
        }
    }

    /// Sends one line on its stdin.
    pub fn send(&mut self, line: &str) -> Result<()> {
        let s = self.stdin.as_mut().context("stdin closed")?;
        writeln!(s, "{line}")?;
        s.flush()?;
        Ok(())
    }

    /// Closes its stdin.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// SIGKILL (by our own child's pid) and reap.
    pub fn kill(&mut self) -> Result<ExitStatus> {
        self.child.kill()?;
        Ok(self.child.wait()?)
    }

    /// Its exit status if it has exited (then its remaining output is collected), else `None`.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>> {
        match self.child.try_wait()? {
            Some(st) => {
                while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.output.push(l);
                }
                Ok(Some(st))
            }
            None => Ok(None),
        }
    }

    /// Waits for it to exit (at most `limit`; SIGKILLs it and fails after that). Collects the
    /// remaining output lines.
    pub fn finish(&mut self, limit: Duration) -> Result<ExitStatus> {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait()? {
                while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.output.push(l);
                }
                return Ok(st);
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!(
                    "tenant {} still running after {limit:?} (killed); output: {:?}",
                    self.pid(),
                    self.output
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Tenant {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
