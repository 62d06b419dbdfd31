//! The control socket: binding `arbiter.sock` (mode 0600, peers checked to be root or the
//! arbiter's own user), reading one JSON request per line, and applying it to the admission state
//! and the persisted records — memory state and disk change together or not at all.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::mpsc::TrySendError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gpuslice_api::protocol::MAX_LINE;
use gpuslice_api::{
    ErrorCode, Request, RequestEnvelope, Response, ResponseEnvelope, PROTOCOL_VERSION,
};

use crate::admission::{Admission, Change};
use crate::fit::Policy;
use crate::inventory::DeviceInfo;
use crate::store::Store;

/// The arbiter's state: admission plus the records on disk.
#[derive(Debug)]
pub struct State {
    admission: Admission,
    store: Store,
    sched: Option<std::sync::Arc<crate::sched::Scheduler>>,
}

fn error(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error {
        code,
        message: message.into(),
    }
}

impl State {
    /// Builds the state from the devices and the records in `store`. Returns the state and the
    /// warnings to log (unreadable records, records for devices that are gone, over-capacity).
    pub fn open(
        devices: Vec<DeviceInfo>,
        policy: Policy,
        store: Store,
    ) -> io::Result<(State, Vec<String>)> {
        let mut admission = Admission::new(devices, policy);
        let (records, mut warnings) = store.load_all()?;
        for r in records {
            let id = r.slice_id.clone();
            match admission.restore(r) {
                Ok(w) => warnings.extend(w),
                Err(e) => warnings.push(format!("slice \"{id}\" not restored: {e}")),
            }
        }
        Ok((
            State {
                admission,
                store,
                sched: None,
            },
            warnings,
        ))
    }

    /// Attaches the time-slice scheduler: every slice (restored ones now, new ones on admit)
    /// gets leased region files and is scheduled on its devices. Returns warnings to log.
    pub fn attach_scheduler(
        &mut self,
        sched: std::sync::Arc<crate::sched::Scheduler>,
    ) -> Vec<String> {
        self.sched = Some(sched);
        let mut warnings = Vec::new();
        let slices: Vec<_> = self.admission.slices().cloned().collect();
        for rec in slices {
            if let Err(e) = self.start_slice(&rec) {
                warnings.push(format!("slice \"{}\": {e}", rec.slice_id));
            }
        }
        warnings
    }

    /// The scheduler, when attached.
    pub fn scheduler(&self) -> Option<&std::sync::Arc<crate::sched::Scheduler>> {
        self.sched.as_ref()
    }

    /// Creates the slice's region files and schedules it (with a scheduler attached).
    fn start_slice(&self, rec: &gpuslice_api::SliceStatus) -> Result<(), String> {
        let Some(sched) = &self.sched else {
            return Ok(());
        };
        let dir = self.store.slice_dir(&rec.slice_id);
        let p = self.admission.policy();
        crate::slices::create(&dir, rec, (p.context_reserve, p.reserve()))
            .map_err(|e| e.to_string())?;
        let params = crate::sched::params_of(&rec.request);
        for (entry, d) in rec.devices.iter().enumerate() {
            sched.add(d.index, &rec.slice_id, &dir, entry, params);
        }
        Ok(())
    }

    /// What each admitted slice holds now, read from its `usage` file (0 without one).
    fn held(&self, id: &str, uuid: &str) -> u64 {
        self.admission
            .slice(id)
            .and_then(|s| {
                crate::metrics::measured_use(&self.store.slice_dir(id), s)
                    .get(uuid)
                    .copied()
            })
            .unwrap_or(0)
    }

    /// Rewrites the region caps of the best-effort slices whose effective cap changed since
    /// `before` (a neighbour came, went or changed), all but `skip` (whose files were just
    /// written whole). Region files exist only with a scheduler attached.
    fn rewrite_best_effort(&self, before: &Admission, skip: &str) {
        if self.sched.is_none() {
            return;
        }
        for s in self.admission.slices() {
            if s.slice_id == skip
                || before.slice(&s.slice_id).map(|o| &o.devices) == Some(&s.devices)
            {
                continue;
            }
            let dir = self.store.slice_dir(&s.slice_id);
            if let Err(e) = crate::slices::write_memory_caps(&dir, s) {
                tracing::warn!(
                    "slice {}: cannot rewrite its best-effort memory cap: {e}",
                    s.slice_id
                );
            }
        }
    }

    /// The admission state.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Applies one request.
    pub fn handle(&mut self, request: Request) -> Response {
        match request {
            Request::Admit {
                slice_id,
                request,
                owner,
            } => {
                let mut next = self.admission.clone();
                let held = |id: &str, uuid: &str| self.held(id, uuid);
                match next.admit_holding(&slice_id, request, owner, &held) {
                    Err(e) => {
                        crate::metrics::counters().add_refusal(e.code());
                        error(e.code(), e.to_string())
                    }
                    Ok(got) => {
                        if !got.existing {
                            let Some(rec) = next.slice(&slice_id) else {
                                return error(ErrorCode::Internal, "admitted slice vanished");
                            };
                            if let Err(e) = self.store.save(rec) {
                                let _ = self.store.remove(&slice_id);
                                return error(
                                    ErrorCode::Internal,
                                    format!("cannot write the slice record: {e}"),
                                );
                            }
                            crate::reclaim::record_owner_at_admit(
                                &self.store.slice_dir(&slice_id),
                                &rec.owner,
                            );
                            if let Err(e) = self.start_slice(rec) {
                                let _ = self.store.remove(&slice_id);
                                return error(
                                    ErrorCode::Internal,
                                    format!("cannot create the slice files: {e}"),
                                );
                            }
                            let before = std::mem::replace(&mut self.admission, next);
                            self.rewrite_best_effort(&before, &slice_id);
                        }
                        Response::Admitted {
                            slice_dir: self.store.slice_dir(&slice_id),
                            slice_id,
                            devices: got.devices,
                            existing: got.existing,
                        }
                    }
                }
            }
            Request::Release { slice_id } => {
                if self.admission.slice(&slice_id).is_none() {
                    return error(ErrorCode::NotFound, format!("no slice \"{slice_id}\""));
                }
                if let Some(sched) = &self.sched {
                    sched.remove(&slice_id);
                }
                if let Err(e) = self.store.remove(&slice_id) {
                    return error(
                        ErrorCode::Internal,
                        format!("cannot remove the slice directory: {e}"),
                    );
                }
                let before = self.admission.clone();
                match self.admission.release(&slice_id) {
                    Ok(_) => {
                        self.rewrite_best_effort(&before, &slice_id);
                        Response::Released { slice_id }
                    }
                    Err(e) => error(e.code(), e.to_string()),
                }
            }
            Request::Update {
                slice_id,
                memory,
                compute,
                compute_limit,
                priority,
            } => {
                let change = Change {
                    memory,
                    compute,
                    compute_limit,
                    priority,
                };
                let mut next = self.admission.clone();
                // Measured use, from the slices' usage files: the slice's own for the below-use
                // warning, best-effort neighbours' so that their caps never drop below it.
                let held = |id: &str, uuid: &str| self.held(id, uuid);
                match next.update_holding(&slice_id, &change, &held) {
                    Err(e) => error(e.code(), e.to_string()),
                    Ok(up) => {
                        let Some(rec) = next.slice(&slice_id) else {
                            return error(ErrorCode::Internal, "updated slice vanished");
                        };
                        if let Err(e) = self.store.save(rec) {
                            return error(
                                ErrorCode::Internal,
                                format!("cannot write the slice record: {e}"),
                            );
                        }
                        if let Some(sched) = &self.sched {
                            // Live resize: limits (memory cap is one store) and shares now.
                            let dir = self.store.slice_dir(&slice_id);
                            if let Err(e) = crate::slices::write_limits(&dir, rec) {
                                tracing::warn!("slice {slice_id}: cannot rewrite limits: {e}");
                            }
                            sched.update(&slice_id, crate::sched::params_of(&rec.request));
                        }
                        let before = std::mem::replace(&mut self.admission, next);
                        self.rewrite_best_effort(&before, &slice_id);
                        Response::Updated {
                            slice_id,
                            devices: up.devices,
                            warnings: up.warnings,
                        }
                    }
                }
            }
            Request::Bind {
                slice_id,
                pid,
                cgroup,
            } => {
                let mut next = self.admission.clone();
                let rec = match next.bind(&slice_id, pid, cgroup) {
                    Ok(rec) => rec,
                    Err(e) => return error(e.code(), e.to_string()),
                };
                if let Err(e) = self.store.save(rec) {
                    return error(
                        ErrorCode::Internal,
                        format!("cannot write the slice record: {e}"),
                    );
                }
                crate::reclaim::record_owner_at_admit(&self.store.slice_dir(&slice_id), &rec.owner);
                self.admission = next;
                Response::Bound { slice_id }
            }
            Request::Status {} => {
                let mut status = self.admission.status();
                if let Some(sched) = &self.sched {
                    crate::sched::fill_shares(&mut status, &sched.status());
                }
                status.backstop = crate::backstop::recent(&status.slices);
                Response::Status(status)
            }
        }
    }

    /// Parses and applies one request line.
    pub fn handle_line(&mut self, line: &str) -> ResponseEnvelope {
        // Check the version first so an old client gets `version`, not a parse error.
        let value: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                return ResponseEnvelope::new(error(
                    ErrorCode::BadRequest,
                    format!("not JSON: {e}"),
                ))
            }
        };
        match value.get("version").and_then(|v| v.as_u64()) {
            Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
            Some(v) => {
                return ResponseEnvelope::new(error(
                    ErrorCode::Version,
                    format!(
                        "protocol version {v} is not supported (arbiter speaks {PROTOCOL_VERSION})"
                    ),
                ))
            }
            None => {
                return ResponseEnvelope::new(error(ErrorCode::BadRequest, "missing \"version\""))
            }
        }
        match serde_json::from_value::<RequestEnvelope>(value) {
            Ok(env) => {
                let what = describe(&env.request);
                let response = self.handle(env.request);
                log_outcome(what, &response);
                ResponseEnvelope::new(response)
            }
            Err(e) => ResponseEnvelope::new(error(ErrorCode::BadRequest, e.to_string())),
        }
    }
}

/// What a state-changing request is, for the log (`None`: a query, not logged).
fn describe(r: &Request) -> Option<String> {
    match r {
        Request::Admit { slice_id, .. } => Some(format!("admit {slice_id}")),
        Request::Release { slice_id } => Some(format!("release {slice_id}")),
        Request::Update { slice_id, .. } => Some(format!("update {slice_id}")),
        Request::Bind { slice_id, pid, .. } => Some(match pid {
            Some(p) => format!("bind {slice_id} to pid {p}"),
            None => format!("bind {slice_id}"),
        }),
        _ => None,
    }
}

/// One line per admit, release, update and bind at the default level: what was asked and
/// what came of it (placement, or the refusal's reason).
fn log_outcome(what: Option<String>, r: &Response) {
    let Some(what) = what else { return };
    match r {
        Response::Admitted { devices, .. } => {
            let on: Vec<String> = devices
                .iter()
                .map(|d| match (d.memory_cap, d.memory_best_effort) {
                    (Some(c), _) => format!("GPU {} cap {} MiB", d.index, c >> 20),
                    (None, Some(b)) => format!("GPU {} best effort, {} MiB now", d.index, b >> 20),
                    (None, None) => format!("GPU {} uncapped", d.index),
                })
                .collect();
            tracing::info!("{what}: admitted on {}", on.join(", "));
        }
        Response::Error { code, message } => {
            tracing::info!("{what}: refused ({code:?}): {message}")
        }
        _ => tracing::info!("{what}: done"),
    }
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
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
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
        let resp = ResponseEnvelope::new(error(
            ErrorCode::BadRequest,
            format!("uid {uid} may not use the arbiter socket (root only)"),
        ));
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
            let r = ResponseEnvelope::new(error(
                ErrorCode::BadRequest,
                format!("request line longer than {MAX_LINE} bytes"),
            ));
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
                Err(_) => ResponseEnvelope::new(error(ErrorCode::BadRequest, "not UTF-8")),
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
    let resp = ResponseEnvelope::new(error(
        ErrorCode::Busy,
        format!(
            "arbiter busy: {} connections being served and {} waiting; retry shortly",
            limits.workers, limits.backlog
        ),
    ));
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
