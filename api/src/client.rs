//! The one arbiter client (the runtime, the hook, the kubelet plugin and the CLI): one JSON
//! line out, one in (`docs/protocol.md`), every socket operation bounded by a timeout, every
//! error naming the socket.
//!
//! `bind` (pid and cgroup of a created container): an older arbiter that does not know it answers
//! `bad_request`, which [`BindResult::Unsupported`] reports so the hook can carry on.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::protocol::{MAX_LINE, SOCKET_NAME};
use crate::{
    AssignedDevice, ErrorCode, Owner, PodRef, Request, RequestEnvelope, Response, ResponseEnvelope,
    SliceRequest, PROTOCOL_VERSION,
};

/// Default bound on connecting, sending and waiting for the answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nobody answers on the socket.
    #[error("{}", unreachable(path, cause))]
    Unreachable {
        /// The socket.
        path: PathBuf,
        /// The connect error (said once, in the message).
        cause: io::Error,
    },
    /// The connection broke, timed out, or the reply was not understood.
    #[error("arbiter at {path}: {message}")]
    Protocol {
        /// The socket.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The arbiter answered with an error.
    #[error("{message}")]
    Arbiter {
        /// Its code.
        code: ErrorCode,
        /// Its sentence.
        message: String,
    },
}

/// The arbiter is down when its socket is missing (it removes it when it stops) or refuses
/// connections (it was killed and left the socket file); anything else is said as it is.
fn unreachable(path: &Path, cause: &io::Error) -> String {
    const HINT: &str = "start it (systemctl start gpuslice-arbiter), or name another state directory (--state-dir, GPUSLICE_STATE_DIR)";
    match cause.kind() {
        io::ErrorKind::NotFound => format!(
            "cannot reach the arbiter (the arbiter is not running: no socket at {}); {HINT}",
            path.display()
        ),
        io::ErrorKind::ConnectionRefused => format!(
            "cannot reach the arbiter (the arbiter is not running: {} refuses connections, a socket left by a killed arbiter); {HINT}",
            path.display()
        ),
        _ => format!("cannot reach the arbiter at {}: {cause}", path.display()),
    }
}

/// A connection to the arbiter.
#[derive(Debug)]
pub struct Client {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

/// The admission as the runtime needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Host directory of the slice.
    pub slice_dir: PathBuf,
    /// Assigned devices.
    pub devices: Vec<AssignedDevice>,
    /// True when the slice already existed (then a failed create must not release it).
    pub existing: bool,
}

/// Outcome of `bind`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindResult {
    /// Recorded.
    Bound,
    /// The arbiter does not know `bind` (older protocol); its message.
    Unsupported(String),
}

impl Client {
    /// Connects to `<state_dir>/arbiter.sock`.
    pub fn connect(state_dir: &Path, timeout: Duration) -> Result<Client, ClientError> {
        Client::connect_socket(&state_dir.join(SOCKET_NAME), timeout)
    }

    /// Connects to the socket at `path`.
    pub fn connect_socket(path: &Path, timeout: Duration) -> Result<Client, ClientError> {
        let s = UnixStream::connect(path).map_err(|cause| ClientError::Unreachable {
            path: path.to_path_buf(),
            cause,
        })?;
        let proto = |e: io::Error| ClientError::Protocol {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        s.set_read_timeout(Some(timeout)).map_err(proto)?;
        s.set_write_timeout(Some(timeout)).map_err(proto)?;
        let writer = s.try_clone().map_err(proto)?;
        Ok(Client {
            path: path.to_path_buf(),
            reader: BufReader::new(s),
            writer,
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn proto(&self, message: impl Into<String>) -> ClientError {
        ClientError::Protocol {
            path: self.path.clone(),
            message: message.into(),
        }
    }

    /// Sends one line and reads the answer.
    fn exchange(&mut self, mut line: Vec<u8>) -> Result<Response, ClientError> {
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .map_err(|e| self.proto(format!("send: {e}")))?;
        let mut answer = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_LINE as u64 * 4)
            .read_until(b'\n', &mut answer)
            .map_err(|e| match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    self.proto("no answer in time")
                }
                _ => self.proto(format!("receive: {e}")),
            })?;
        if n == 0 {
            return Err(self.proto("closed the connection without answering"));
        }
        let env: ResponseEnvelope = serde_json::from_slice(&answer)
            .map_err(|e| self.proto(format!("unreadable answer: {e}")))?;
        if env.version != PROTOCOL_VERSION {
            return Err(self.proto(format!(
                "speaks protocol version {}, this binary {PROTOCOL_VERSION}",
                env.version
            )));
        }
        Ok(env.response)
    }

    /// Sends a request; an `error` answer becomes [`ClientError::Arbiter`].
    pub fn call(&mut self, request: Request) -> Result<Response, ClientError> {
        let line = serde_json::to_vec(&RequestEnvelope::new(request))
            .map_err(|e| self.proto(e.to_string()))?;
        match self.exchange(line)? {
            Response::Error { code, message } => Err(ClientError::Arbiter { code, message }),
            r => Ok(r),
        }
    }

    /// Admits `slice_id`.
    pub fn admit(
        &mut self,
        slice_id: &str,
        request: SliceRequest,
        owner: Owner,
    ) -> Result<Admission, ClientError> {
        match self.call(Request::Admit {
            slice_id: slice_id.to_string(),
            request,
            owner,
        })? {
            Response::Admitted {
                slice_dir,
                devices,
                existing,
                ..
            } => Ok(Admission {
                slice_dir,
                devices,
                existing,
            }),
            other => Err(self.proto(format!("unexpected answer to admit: {other:?}"))),
        }
    }

    /// Releases `slice_id`; `Ok(false)` when it did not exist (already released).
    pub fn release(&mut self, slice_id: &str) -> Result<bool, ClientError> {
        match self.call(Request::Release {
            slice_id: slice_id.to_string(),
        }) {
            Ok(Response::Released { .. }) => Ok(true),
            Err(ClientError::Arbiter {
                code: ErrorCode::NotFound,
                ..
            }) => Ok(false),
            Ok(other) => Err(self.proto(format!("unexpected answer to release: {other:?}"))),
            Err(e) => Err(e),
        }
    }

    /// Tells the arbiter the container's real pid and cgroup (`op: "bind"`).
    pub fn bind(
        &mut self,
        slice_id: &str,
        pid: Option<u32>,
        cgroup: Option<&str>,
    ) -> Result<BindResult, ClientError> {
        self.bind_pod(slice_id, pid, cgroup, None)
    }

    /// [`Client::bind`], with the container's Kubernetes Pod when it has one (its metric
    /// labels, for a slice admitted before the container existed).
    pub fn bind_pod(
        &mut self,
        slice_id: &str,
        pid: Option<u32>,
        cgroup: Option<&str>,
        pod: Option<PodRef>,
    ) -> Result<BindResult, ClientError> {
        let request = Request::Bind {
            slice_id: slice_id.to_string(),
            pid,
            cgroup: cgroup.map(str::to_string),
            pod,
        };
        let line = serde_json::to_vec(&RequestEnvelope::new(request))
            .map_err(|e| self.proto(e.to_string()))?;
        match self.exchange(line)? {
            Response::Error {
                code: ErrorCode::BadRequest,
                message,
            } if message.contains("bind") => Ok(BindResult::Unsupported(message)),
            Response::Error { code, message } => Err(ClientError::Arbiter { code, message }),
            _ => Ok(BindResult::Bound),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// One connection to a one-shot server that answers `reply` to the first line and returns
    /// the line it read.
    fn exchange_with(reply: Response, f: impl FnOnce(&mut Client)) -> String {
        let mut reply = serde_json::to_string(&ResponseEnvelope::new(reply)).unwrap();
        reply.push('\n');
        let dir = std::env::temp_dir().join(format!(
            "gpuslice-client-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(SOCKET_NAME);
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line).unwrap();
            (&s).write_all(reply.as_bytes()).unwrap();
            line
        });
        let mut c = Client::connect(&dir, Duration::from_secs(5)).unwrap();
        f(&mut c);
        let line = server.join().unwrap();
        std::fs::remove_dir_all(&dir).ok();
        line
    }

    #[test]
    fn a_missing_or_dead_socket_says_the_arbiter_is_not_running() {
        let dir = std::env::temp_dir().join(format!("gpuslice-client-down-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(SOCKET_NAME);
        let _ = std::fs::remove_file(&path);
        let e = Client::connect(&dir, DEFAULT_TIMEOUT)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot reach the arbiter"), "{e}");
        assert!(
            e.contains(&format!("not running: no socket at {}", path.display())),
            "{e}"
        );
        // A socket file nobody listens on (a killed arbiter's).
        drop(UnixListener::bind(&path).unwrap());
        let e = Client::connect(&dir, DEFAULT_TIMEOUT)
            .unwrap_err()
            .to_string();
        assert!(e.contains("refuses connections"), "{e}");
        assert!(e.contains("systemctl start gpuslice-arbiter"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn bind_is_sent_as_the_typed_request() {
        let line = exchange_with(
            Response::Bound {
                slice_id: "s".into(),
            },
            |c| assert_eq!(c.bind("s", Some(7), None).unwrap(), BindResult::Bound),
        );
        assert_eq!(
            line.trim_end(),
            r#"{"version":1,"op":"bind","slice_id":"s","pid":7}"#
        );
        let env: RequestEnvelope = serde_json::from_str(&line).unwrap();
        assert_eq!(
            env.request,
            Request::Bind {
                slice_id: "s".into(),
                pid: Some(7),
                cgroup: None,
                pod: None,
            }
        );
    }

    #[test]
    fn an_arbiter_without_bind_is_reported_not_failed() {
        exchange_with(
            Response::Error {
                code: ErrorCode::BadRequest,
                message: "unknown variant `bind`".into(),
            },
            |c| {
                let r = c.bind("s", None, Some("/kubepods/p/c")).unwrap();
                assert!(matches!(r, BindResult::Unsupported(m) if m.contains("bind")));
            },
        );
        exchange_with(
            Response::Error {
                code: ErrorCode::NotFound,
                message: "no slice s".into(),
            },
            |c| {
                let e = c.bind("s", Some(1), None).unwrap_err();
                assert!(
                    matches!(
                        e,
                        ClientError::Arbiter {
                            code: ErrorCode::NotFound,
                            ..
                        }
                    ),
                    "{e:?}"
                );
            },
        );
    }
}
