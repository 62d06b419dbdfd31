//! Small helpers for running commands from xtask: workspace paths and checked process execution.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The workspace root (the parent of the xtask crate).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// The cargo target directory (honours CARGO_TARGET_DIR).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// A `cargo` command run from the workspace root.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    c
}

/// Run a command, inheriting stdio; fail with the command line if it does not exit 0.
pub fn exec(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    eprintln!("$ {shown}");
    let status = cmd.status().with_context(|| format!("starting {shown}"))?;
    if !status.success() {
        bail!("{shown} failed: {status}");
    }
    Ok(())
}

/// Like [`exec`], but a failure also quotes the command's last line on stderr, so the reason a
/// script gave reaches `cargo xtask test`'s summary (CI shows only the end of a run's output).
/// Stderr is still passed through as it comes. A grandchild that outlives the command and keeps
/// the pipe open does not hold the suite: the copy is waited for 2 s after the command exits.
pub fn exec_quoting_last_error(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    eprintln!("$ {shown}");
    let mut child = cmd
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {shown}"))?;
    let pipe = child.stderr.take().context("the child's stderr pipe")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(pass_through(BufReader::new(pipe), &mut std::io::stderr()));
    });
    let status = child
        .wait()
        .with_context(|| format!("waiting for {shown}"))?;
    let last = rx.recv_timeout(Duration::from_secs(2)).ok().flatten();
    if !status.success() {
        match last {
            Some(line) => bail!("{shown} failed: {status}: {line}"),
            None => bail!("{shown} failed: {status}"),
        }
    }
    Ok(())
}

/// Copies lines from `from` to `to` until EOF; returns the last non-empty one.
fn pass_through(from: impl BufRead, to: &mut impl Write) -> Option<String> {
    let mut last = None;
    for line in from.split(b'\n') {
        let Ok(line) = line else { break };
        // A line that cannot be shown does not stop the copy.
        let _ = to.write_all(&line).and_then(|()| to.write_all(b"\n"));
        let text = String::from_utf8_lossy(&line).trim().to_string();
        if !text.is_empty() {
            last = Some(text);
        }
    }
    last
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_through_copies_every_line_and_keeps_the_last_non_empty_one() {
        let mut copy = Vec::new();
        let last = pass_through(&b"one\ntwo: why\n\n  \n"[..], &mut copy);
        assert_eq!(copy, b"one\ntwo: why\n\n  \n");
        assert_eq!(last.as_deref(), Some("two: why"));
        assert_eq!(pass_through(&b""[..], &mut Vec::new()), None);
    }

    #[test]
    fn a_failing_command_is_quoted_with_its_last_stderr_line() {
        let err = exec_quoting_last_error(
            Command::new("sh").args(["-c", "echo early >&2; echo 'test: the reason' >&2; exit 3"]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.ends_with("exit status: 3: test: the reason"), "{err}");
        exec_quoting_last_error(Command::new("sh").args(["-c", "echo fine >&2"])).unwrap();
        // A background grandchild keeping stderr open does not hold the caller.
        let t = std::time::Instant::now();
        exec_quoting_last_error(Command::new("sh").args(["-c", "sleep 5 & echo started >&2"]))
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    }
}
