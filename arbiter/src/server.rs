//! The control socket, a thin layer over [`State`]: binding `arbiter.sock` (mode 0600, peers
//! checked to be root or the arbiter's own user), a bounded pool of workers, reading one request
//! line, handing it to [`State::handle_line`] and writing the reply. What a request does lives in
//! [`crate::state`].

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::mpsc::TrySendError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gpuslice_api::protocol::MAX_LINE;
use gpuslice_api::{ErrorCode, Response, ResponseEnvelope};

pub use crate::state::State;

/// A reply the socket layer gives by itself (a refused peer, a line too long, busy).
fn refusal(code: ErrorCode, message: impl Into<String>) -> ResponseEnvelope {
    ResponseEnvelope::new(Response::Error {
        code,
        message: message.into(),
    })
}

/// Binds the control socket at `path` with mode 0600, replacing a stale socket file.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_dir() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is a directory", path.display()),
            ))
        }
        Ok(_) => {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another arbiter is serving {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Err(_) => {}
    }
    // SAFETY: umask only changes this process's file-creation mask; restored right after bind
    // so the socket is never reachable with wider permissions.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let listener = bound?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// The uid of the peer of a connected unix socket.
pub fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>())
        .unwrap_or(libc::socklen_t::MAX);
    // SAFETY: the fd is a live socket owned by `stream`; `cred` and `len` are valid for writes
    // and `len` holds the size of `cred`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Serves one connection until the peer closes it or stays silent for `idle`.
pub fn serve_connection(
    stream: UnixStream,
    state: &Mutex<State>,
    idle: Duration,
) -> io::Result<()> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let uid = peer_uid(&stream)?;
    let mut writer = stream.try_clone()?;
    if uid != 0 && uid != me {
        let resp = refusal(
            ErrorCode::BadRequest,
            format!("uid {uid} may not use the arbiter socket (root only)"),
        );
        writeln!(
            writer,
            "{}",
            serde_json::to_string(&resp).map_err(io::Error::other)?
        )?;
        return Ok(());
    }
    stream.set_read_timeout(Some(idle))?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut buf = Vec::new();
        let n = (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(());
        }
        let resp = if buf.last() != Some(&b'\n') && n >= MAX_LINE {
            let r = refusal(
                ErrorCode::BadRequest,
                format!("request line longer than {MAX_LINE} bytes"),
            );
            writeln!(
                writer,
                "{}",
                serde_json::to_string(&r).map_err(io::Error::other)?
            )?;
            return Ok(());
        } else {
            match std::str::from_utf8(&buf) {
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .handle_line(line.trim_end()),
                Err(_) => refusal(ErrorCode::BadRequest, "not UTF-8"),
            }
        };
        let mut out = serde_json::to_vec(&resp).map_err(io::Error::other)?;
        out.push(b'\n');
        writer.write_all(&out)?;
    }
}

/// Bounds of the socket layer: the arbiter never serves more connections at once than it has
/// workers, never holds more waiting than the backlog, and answers every connection beyond that
/// with a `busy` error instead of dropping it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Worker threads, each serving one connection at a time.
    pub workers: usize,
    /// Accepted connections waiting for a worker.
    pub backlog: usize,
    /// How long a connection may sit idle between requests before it is closed.
    pub idle: Duration,
}

impl Default for Limits {
    /// 32 workers, 256 waiting, 30 s idle. Every client (CLI, hook, shim, kubelet plugin) sends
    /// one request and reads its reply, so a worker is busy for milliseconds: 32 serve a node's
    /// burst of container starts; the backlog bounds the file descriptors held (32 + 256 stay
    /// well under the usual limit of 1024), and the idle bound frees a worker from a peer that
    /// connected and said nothing.
    fn default() -> Limits {
        Limits {
            workers: 32,
            backlog: 256,
            idle: Duration::from_secs(30),
        }
    }
}

/// Accepts connections forever within [`Limits::default`].
pub fn serve(listener: UnixListener, state: Arc<Mutex<State>>) -> io::Result<()> {
    serve_with(listener, state, Limits::default())
}

/// Accepts connections forever: a fixed pool of `limits.workers` threads serves them in
/// arrival order; one that finds the backlog full gets a `busy` error line and is closed.
pub fn serve_with(
    listener: UnixListener,
    state: Arc<Mutex<State>>,
    limits: Limits,
) -> io::Result<()> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<UnixStream>(limits.backlog);
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..limits.workers.max(1) {
        let rx = Arc::clone(&rx);
        let st = Arc::clone(&state);
        std::thread::Builder::new()
            .name(format!("conn-{i}"))
            .spawn(move || loop {
                let next = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                let Ok(stream) = next else { return };
                if let Err(e) = serve_connection(stream, &st, limits.idle) {
                    tracing::debug!("connection ended: {e}");
                }
            })?;
    }
    // Busy peers get their reply at once, then a drainer reads what they sent before closing:
    // closing a unix socket with unread data resets it, and the peer would lose the reply.
    let (drain_tx, drain_rx) = std::sync::mpsc::sync_channel::<UnixStream>(limits.backlog);
    std::thread::Builder::new()
        .name("conn-busy".into())
        .spawn(move || {
            for s in drain_rx {
                drain_request(&s);
            }
        })?;
    for stream in listener.incoming() {
        match stream {
            Ok(s) => match tx.try_send(s) {
                Ok(()) => {}
                Err(TrySendError::Full(s)) | Err(TrySendError::Disconnected(s)) => {
                    reply_busy(&s, &limits);
                    // With the drainer behind too, close now: best effort.
                    let _ = drain_tx.try_send(s);
                }
            },
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                // Out of descriptors: the waiting peers stay in the kernel's queue; do not spin.
                if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
    Ok(())
}

/// Reads (and drops) a busy peer's request line, for at most a second, so the connection closes
/// cleanly after the reply it already has.
fn drain_request(s: &UnixStream) {
    let _ = s.shutdown(std::net::Shutdown::Write);
    let _ = s.set_read_timeout(Some(Duration::from_millis(1000)));
    let mut sink = Vec::new();
    let _ = BufReader::new(s)
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut sink);
}

/// Tells a connection beyond the backlog that the arbiter is busy, without reading its request.
/// A fresh socket's send buffer takes the line at once; the timeout only guards the accept loop.
fn reply_busy(stream: &UnixStream, limits: &Limits) {
    let resp = refusal(
        ErrorCode::Busy,
        format!(
            "arbiter busy: {} connections being served and {} waiting; retry shortly",
            limits.workers, limits.backlog
        ),
    );
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    if let Ok(mut line) = serde_json::to_vec(&resp) {
        line.push(b'\n');
        let _ = { stream }.write_all(&line);
    }
    tracing::warn!(
        "connection refused as busy (backlog of {} full)",
        limits.backlog
    );
}
