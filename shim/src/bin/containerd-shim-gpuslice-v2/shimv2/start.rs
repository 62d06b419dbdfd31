//! `containerd-shim-gpuslice-v2 start` and `delete`: run runc-v2's own subcommand with our
//! arguments, environment, standard input and working directory (the bundle) unchanged.
//! `start` then makes sure a proxy serves the socket runc-v2 announced — one proxy per runc-v2
//! socket, found again by its address, so a second `start` of the same group (containerd 1.6
//! starts one per container of a Pod) reuses it — rewrites the bundle's `address` file and
//! answers containerd with our address in runc-v2's form. `delete` also releases the slice of
//! the shim's id (idempotent), for a shim that died without running the `poststop` hook.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use containerd_shim::Flags;

use super::proxy::{ENV_API, ENV_UPSTREAM};
use super::reply::{Reply, ReplyError};
use super::upstream::{self, proxy_address, socket_path, UpstreamError};
use gpuslice_oci::ident::slice_id_for;
use gpuslice_oci::prepare::release;
use gpuslice_oci::Settings;

/// Why `start` or `delete` failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// runc-v2 not found.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A process could not be started.
    #[error("cannot run {path}: {source}")]
    Spawn {
        /// The program.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// runc-v2's `start` failed; its output.
    #[error("{path} start failed ({status}): {output}")]
    UpstreamFailed {
        /// The program.
        path: PathBuf,
        /// Exit status.
        status: std::process::ExitStatus,
        /// Its stderr and stdout.
        output: String,
    },
    /// Its answer is unreadable.
    #[error(transparent)]
    Reply(#[from] ReplyError),
    /// Our proxy did not come up.
    #[error("gpuslice proxy for {upstream} did not start: {why}")]
    Proxy {
        /// runc-v2's address.
        upstream: String,
        /// Why.
        why: String,
    },
}

/// Runs `start`; returns the answer to print on stdout.
pub fn start(args: &[OsString], flags: &Flags) -> Result<Vec<u8>, StartError> {
    let up = upstream::find()?;
    let out = Command::new(&up)
        .args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| StartError::Spawn {
            path: up.clone(),
            source,
        })?;
    if !out.status.success() {
        let mut output = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let so = String::from_utf8_lossy(&out.stdout);
        if !so.trim().is_empty() {
            output.push_str(&format!(" {}", so.trim()));
        }
        return Err(StartError::UpstreamFailed {
            path: up,
            status: out.status,
            output,
        });
    }
    let reply = Reply::parse(&out.stdout)?;
    let ours = proxy_address(&reply.address);
    ensure_proxy(&ours, &reply, flags)?;
    if Path::new("address").exists() {
        // containerd 1.x reads it back after a restart to reconnect: it must name us.
        let _ = std::fs::write("address", &ours);
    }
    Ok(reply.render(&ours))
}

/// Starts the proxy for `reply.address` unless one serves `ours` already.
fn ensure_proxy(ours: &str, reply: &Reply, flags: &Flags) -> Result<(), StartError> {
    let err = |why: String| StartError::Proxy {
        upstream: reply.address.clone(),
        why,
    };
    let path = socket_path(ours);
    if let Some(dir) = Path::new(path).parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    }
    let lock = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(format!("{path}.lock"))
        .map_err(|e| err(format!("lock: {e}")))?;
    lock.lock().map_err(|e| err(format!("lock: {e}")))?;
    if UnixStream::connect(path).is_ok() {
        return Ok(());
    }
    let me = std::env::current_exe().map_err(|e| err(e.to_string()))?;
    let mut c = Command::new(&me);
    c.args(["-namespace", &flags.namespace, "-id", &flags.id])
        .args(["-address", &flags.address, "-socket", ours]);
    if flags.debug {
        c.arg("-debug");
    }
    c.env(ENV_UPSTREAM, &reply.address)
        .env(ENV_API, reply.version.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_fifo())
        .process_group(0);
    let mut child = c.spawn().map_err(|source| StartError::Spawn {
        path: me.clone(),
        source,
    })?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    if line.trim() != "ready" {
        let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
        return Err(err(format!(
            "the proxy exited ({status}); see containerd's log for its message"
        )));
    }
    Ok(())
}

/// The bundle's `log` fifo, which containerd reads into its own log; `/dev/null` without a
/// reader. Opened without blocking, then switched back to blocking writes.
fn log_fifo() -> Stdio {
    let Ok(md) = std::fs::metadata("log") else {
        return Stdio::null();
    };
    if !md.file_type().is_fifo() {
        return Stdio::null();
    }
    match std::fs::File::options()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("log")
    {
        Ok(f) => {
            use std::os::fd::AsRawFd;
            let fd = f.as_raw_fd();
            // SAFETY: `fd` is an open descriptor owned by `f` for the duration of both calls;
            // F_GETFL/F_SETFL only change its status flags.
            unsafe {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                if fl >= 0 {
                    libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
                }
            }
            Stdio::from(f)
        }
        Err(_) => Stdio::null(),
    }
}

/// Runs runc-v2's `delete` (its DeleteResponse goes straight to our stdout), then releases the
/// slice of `flags.id` if one is left. Returns runc-v2's exit code.
pub fn delete(args: &[OsString], flags: &Flags) -> Result<i32, StartError> {
    let up = upstream::find()?;
    let status = Command::new(&up)
        .args(args)
        .status()
        .map_err(|source| StartError::Spawn { path: up, source })?;
    if !flags.id.is_empty() {
        if let Ok(s) = Settings::load(None, None) {
            let mut w = Vec::new();
            release(&s, &slice_id_for(&flags.id), &mut w);
        }
    }
    Ok(status.code().unwrap_or(1))
}
