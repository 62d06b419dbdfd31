//! The long-lived half of `containerd-shim-gpuslice-v2`: a ttrpc server on our socket that
//! forwards every Task call to runc-v2's socket unchanged (same payload, timeout and metadata;
//! only the service name is set to the Task API version runc-v2 announced), except:
//!
//! * `Create`: the bundle is prepared first (`gpuslice_oci::prepare_bundle`: request, admission, spec
//!   edit; sandboxes and containers that ask for nothing untouched), without the lifecycle hooks:
//!   the proxy binds and releases the slice itself. A failure refuses the Create with the
//!   library's message; runc-v2 never sees it. If runc-v2's Create then fails, a slice admitted by
//!   this call is released; if it succeeds, the slice is bound to the container's pid (from the
//!   `CreateTaskResponse`) and cgroup.
//!   After runc-v2's Create the image's own `/etc/ld.so.preload` entries are merged into the
//!   slice's preload file ([`gpuslice_oci::late_preload`]).
//!   The image is then checked for the interposer's needs ([`gpuslice_oci::loadable`]: the
//!   root filesystem was not mounted at the bundle step); an image it cannot load in gets the
//!   container deleted, the slice released and the Create refused.
//! * `Delete` of a container (no exec id) that this proxy admitted: after runc-v2 deleted it, the
//!   slice is released. Should the proxy die first, the arbiter's reclaim releases the slice once
//!   the bound process and cgroup are gone.
//!
//! The proxy exits when runc-v2 does (its socket closes), so containerd sees the shim end.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use containerd_shim::protos::api::{CreateTaskRequest, CreateTaskResponse, DeleteRequest};
use containerd_shim::protos::protobuf::{Message, MessageField};
use containerd_shim::protos::ttrpc::{
    self, get_status, Client, Code, MethodHandler, Request, Response, Server, Status, TtrpcContext,
};

use super::upstream::socket_path;
use gpuslice_oci::late_preload::merge_after_create;
use gpuslice_oci::lifecycle::bind_pid;
use gpuslice_oci::prepare::{check_mounted_image, release};
use gpuslice_oci::{prepare_bundle, Outcome, Settings};

/// Environment of the proxy process: runc-v2's address.
pub const ENV_UPSTREAM: &str = "GPUSLICE_SHIM_UPSTREAM";
/// Environment of the proxy process: the Task API version runc-v2 serves.
pub const ENV_API: &str = "GPUSLICE_SHIM_TASK_API";

/// The methods of `containerd.task.v2.Task` / `containerd.task.v3.Task`.
pub const METHODS: [&str; 17] = [
    "State",
    "Create",
    "Start",
    "Delete",
    "Pids",
    "Pause",
    "Resume",
    "Checkpoint",
    "Kill",
    "Exec",
    "ResizePty",
    "CloseIO",
    "Update",
    "Wait",
    "Stats",
    "Connect",
    "Shutdown",
];

/// Writes one line to stderr (the bundle's `log` fifo, which containerd copies into its own
/// log); a reader that went away is ignored.
pub fn log(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "containerd-shim-gpuslice-v2[{}]: {msg}",
        std::process::id()
    );
}

/// Proxy failures before serving.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A required environment variable is missing.
    #[error("{0} is not set (the proxy is started by `containerd-shim-gpuslice-v2 start`)")]
    Env(&'static str),
    /// runc-v2's socket cannot be reached.
    #[error("cannot connect to containerd-shim-runc-v2 at {address}: {source}")]
    Upstream {
        /// The address.
        address: String,
        /// The error.
        #[source]
        source: ttrpc::Error,
    },
    /// Our socket cannot be served.
    #[error("cannot serve {address}: {why}")]
    Serve {
        /// Our address.
        address: String,
        /// Why.
        why: String,
    },
}

/// The forwarding state shared by all handlers.
struct Proxy {
    client: Client,
    upstream: String,
    service: String,
    /// Task API version runc-v2 serves (2: containerd 1.x, 3: containerd 2.x).
    version: i32,
    /// Container id → slice id, for containers admitted by this proxy.
    admitted: Mutex<HashMap<String, String>>,
}

fn status_response(s: Status) -> Response {
    let mut r = Response::new();
    r.status = MessageField::some(s);
    r
}

/// containerd 1.x (Task API 2) uses an error status's message as a format string; its `%`
/// must be doubled there to print as one. containerd 2.x prints it as is.
pub fn status_message(msg: &str, version: i32) -> String {
    if version < 3 {
        msg.replace('%', "%%")
    } else {
        msg.to_string()
    }
}

fn is_ok(r: &Response) -> bool {
    r.status.as_ref().is_none_or(|s| s.code() == Code::OK)
}

impl Proxy {
    fn forward(&self, mut req: Request) -> Response {
        req.service = self.service.clone();
        let method = req.method.clone();
        match self.client.request(req) {
            Ok(r) => r,
            Err(ttrpc::Error::RpcStatus(s)) => status_response(s),
            Err(e) => {
                log(format_args!("{method}: runc v2 shim: {e}"));
                status_response(get_status(
                    Code::UNAVAILABLE,
                    format!(
                        "containerd-shim-gpuslice-v2: containerd-shim-runc-v2 at {}: {e}",
                        self.upstream
                    ),
                ))
            }
        }
    }

    fn call(&self, method: &str, req: Request) -> Response {
        match method {
            "Create" => self.create(req),
            "Delete" => {
                let d = DeleteRequest::parse_from_bytes(&req.payload).ok();
                let r = self.forward(req);
                if let Some(d) = d.filter(|d| d.exec_id.is_empty() && is_ok(&r)) {
                    self.deleted(&d.id);
                }
                r
            }
            _ => self.forward(req),
        }
    }

    fn create(&self, req: Request) -> Response {
        let c = match CreateTaskRequest::parse_from_bytes(&req.payload) {
            Ok(c) => c,
            Err(e) => {
                return status_response(get_status(
                    Code::INVALID_ARGUMENT,
                    format!("containerd-shim-gpuslice-v2: undecodable CreateTaskRequest: {e}"),
                ))
            }
        };
        let refuse = |msg: String| {
            log(format_args!("create {}: refused: {msg}", c.id));
            status_response(get_status(
                Code::FAILED_PRECONDITION,
                status_message(
                    &format!("gpuslice: container \"{}\": {msg}", c.id),
                    self.version,
                ),
            ))
        };
        let mut settings = match Settings::load(None, None) {
            Ok(s) => s,
            Err(e) => return refuse(e.to_string()),
        };
        // This process sees the Create's pid and the Delete: no hook processes needed.
        settings.lifecycle_hooks = false;
        let mut warnings = Vec::new();
        let outcome = prepare_bundle(Path::new(&c.bundle), &c.id, &settings, &mut warnings);
        for w in &warnings {
            log(format_args!("create {}: warning: {w}", c.id));
        }
        match outcome {
            Err(e) => refuse(e.to_string()),
            Ok(Outcome::Sliced { slice_id, fresh }) => {
                log(format_args!(
                    "create {}: slice \"{slice_id}\" admitted",
                    c.id
                ));
                let like = req.clone();
                let r = self.forward(req);
                if is_ok(&r) {
                    self.bind(&settings, &c.id, &slice_id, &r);
                    if let Ok(mut m) = self.admitted.lock() {
                        m.insert(c.id.clone(), slice_id);
                    }
                    // Fail closed on an image the interposer cannot load in, now that it is
                    // mounted: the container is deleted and its slice released.
                    if let Err(e) = check_mounted_image(Path::new(&c.bundle), &settings) {
                        self.undo_create(&c.id, like);
                        return refuse(e.to_string());
                    }
                    // runc-v2 has mounted the root filesystem now; nothing has run in it yet.
                    match merge_after_create(Path::new(&c.bundle), &settings.state_dir) {
                        Ok(0) => {}
                        Ok(n) => log(format_args!(
                            "create {}: {n} preload entries of the image kept",
                            c.id
                        )),
                        Err(e) => log(format_args!(
                            "create {}: warning: the image's preload entries are not kept: {e}",
                            c.id
                        )),
                    }
                } else if fresh {
                    let mut w = Vec::new();
                    release(&settings, &slice_id, &mut w);
                    log(format_args!(
                        "create {}: runc v2 shim failed; slice \"{slice_id}\" released",
                        c.id
                    ));
                    for m in w {
                        log(format_args!("warning: {m}"));
                    }
                }
                r
            }
            Ok(Outcome::Open) => {
                log(format_args!(
                    "create {}: started without a slice (fail open)",
                    c.id
                ));
                let like = req.clone();
                let r = self.forward(req);
                if is_ok(&r) {
                    if let Err(e) = check_mounted_image(Path::new(&c.bundle), &settings) {
                        self.undo_create(&c.id, like);
                        return refuse(e.to_string());
                    }
                }
                r
            }
            Ok(Outcome::Unchanged(why)) => {
                log(format_args!("create {}: unchanged ({why})", c.id));
                self.forward(req)
            }
        }
    }

    /// Binds the slice to the pid runc-v2's `CreateTaskResponse` names. A failure is logged:
    /// the proxy still releases the slice at `Delete`.
    fn bind(&self, settings: &Settings, id: &str, slice_id: &str, r: &Response) {
        let pid = CreateTaskResponse::parse_from_bytes(&r.payload)
            .ok()
            .map(|t| t.pid)
            .filter(|p| *p > 0);
        let Some(pid) = pid else {
            log(format_args!(
                "create {id}: warning: runc v2 shim named no pid; slice \"{slice_id}\" is \
                 released at Delete only"
            ));
            return;
        };
        match bind_pid(settings, slice_id, pid) {
            Ok(None) => {}
            Ok(Some(m)) => log(format_args!(
                "create {id}: warning: the arbiter does not support bind ({m}); slice \
                 \"{slice_id}\" is released at Delete only"
            )),
            Err(e) => log(format_args!("create {id}: warning: {e}")),
        }
    }

    /// Deletes a container runc-v2 has just created (its init has run nothing yet) and
    /// releases a slice this proxy admitted for it. `like` is the Create request, for its
    /// metadata and timeout.
    fn undo_create(&self, id: &str, mut like: Request) {
        let mut d = DeleteRequest::new();
        d.id = id.to_string();
        like.method = "Delete".to_string();
        like.payload = d.write_to_bytes().unwrap_or_default();
        let r = self.forward(like);
        if !is_ok(&r) {
            let why = r
                .status
                .as_ref()
                .map(|s| s.message.clone())
                .unwrap_or_default();
            log(format_args!(
                "create {id}: warning: deleting the refused container: {why}"
            ));
        }
        self.deleted(id);
    }

    fn deleted(&self, id: &str) {
        let slice = self.admitted.lock().ok().and_then(|mut m| m.remove(id));
        let Some(slice) = slice else { return };
        let mut w = Vec::new();
        match Settings::load(None, None) {
            Ok(s) => release(&s, &slice, &mut w),
            Err(e) => w.push(e.to_string()),
        }
        for m in w {
            log(format_args!("delete {id}: {m}"));
        }
    }
}

struct Forward {
    proxy: Arc<Proxy>,
    method: &'static str,
}

impl MethodHandler for Forward {
    fn handler(&self, ctx: TtrpcContext, req: Request) -> ttrpc::Result<()> {
        let res = self.proxy.call(self.method, req);
        ctx.respond(ctx.mh.stream_id, res)
    }
}

/// The method table: every Task method under both API versions, so containerd may call us by
/// either name.
fn methods(proxy: &Arc<Proxy>) -> HashMap<String, Box<dyn MethodHandler + Send + Sync>> {
    let mut m: HashMap<String, Box<dyn MethodHandler + Send + Sync>> = HashMap::new();
    for v in [2, 3] {
        for method in METHODS {
            m.insert(
                format!("/containerd.task.v{v}.Task/{method}"),
                Box::new(Forward {
                    proxy: Arc::clone(proxy),
                    method,
                }),
            );
        }
    }
    m
}

/// Serves `ours` (a `unix://` address) in front of the runc v2 shim named by [`ENV_UPSTREAM`];
/// prints `ready` on stdout once the socket accepts calls; returns when runc-v2 is gone.
pub fn serve(ours: &str) -> Result<(), ProxyError> {
    let upstream = std::env::var(ENV_UPSTREAM).map_err(|_| ProxyError::Env(ENV_UPSTREAM))?;
    let version: i32 = std::env::var(ENV_API)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let client = Client::connect(&upstream).map_err(|source| ProxyError::Upstream {
        address: upstream.clone(),
        source,
    })?;
    let proxy = Arc::new(Proxy {
        client,
        upstream: upstream.clone(),
        service: format!("containerd.task.v{version}.Task"),
        version,
        admitted: Mutex::new(HashMap::new()),
    });
    let serve_err = |why: String| ProxyError::Serve {
        address: ours.to_string(),
        why,
    };
    let path = socket_path(ours);
    if let Some(dir) = Path::new(path).parent() {
        std::fs::create_dir_all(dir).map_err(|e| serve_err(e.to_string()))?;
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).map_err(|e| serve_err(e.to_string()))?;
    use std::os::fd::IntoRawFd;
    let mut server = Server::new()
        .add_listener(listener.into_raw_fd())
        .map_err(|e| serve_err(e.to_string()))?
        .set_thread_count_max(64)
        .register_service(methods(&proxy));
    server.start().map_err(|e| serve_err(e.to_string()))?;
    log(format_args!(
        "serving {ours} in front of {upstream} (containerd.task.v{version}.Task)"
    ));
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "ready");
        let _ = out.flush();
    }
    let upstream_path = socket_path(&upstream);
    wait_upstream_gone(upstream_path);
    // Let a forwarded Shutdown answer reach containerd before the socket goes.
    std::thread::sleep(Duration::from_millis(200));
    let _ = std::fs::remove_file(path);
    // `start` serialises on this lock; the group it guards has ended with runc-v2.
    let _ = std::fs::remove_file(format!("{path}.lock"));
    remove_dead_socket(upstream_path);
    log(format_args!("runc v2 shim gone; exiting"));
    Ok(())
}

/// Removes runc-v2's socket file once nothing listens on it. runc-v2 removes the socket named
/// in the bundle's `address` file when it shuts down, and that file names us (containerd reads
/// it back after a restart), so runc-v2's own socket would stay behind.
fn remove_dead_socket(path: &str) {
    if let Err(e) = UnixStream::connect(path) {
        if e.kind() == std::io::ErrorKind::ConnectionRefused {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Blocks until the runc v2 shim's socket closes an idle connection of ours (its process ended).
fn wait_upstream_gone(path: &str) {
    let Ok(mut s) = UnixStream::connect(path) else {
        return;
    };
    let mut buf = [0u8; 256];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_doubled_for_containerd_1() {
        assert_eq!(status_message("or %)", 2), "or %%)");
        assert_eq!(status_message("or %)", 3), "or %)");
    }

    #[test]
    fn both_api_versions_served() {
        use std::os::fd::IntoRawFd;
        let (a, _b) = UnixStream::pair().unwrap();
        let p = Arc::new(Proxy {
            client: Client::new(a.into_raw_fd()).unwrap(),
            upstream: String::new(),
            service: String::new(),
            version: 2,
            admitted: Mutex::new(HashMap::new()),
        });
        let m = methods(&p);
        assert_eq!(m.len(), 2 * METHODS.len());
        for v in [2, 3] {
            for name in ["Create", "Delete", "Wait", "Shutdown"] {
                assert!(m.contains_key(&format!("/containerd.task.v{v}.Task/{name}")));
            }
        }
    }
}
