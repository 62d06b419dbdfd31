//! The control-socket client: one JSON request line, one response line
//! (`docs/protocol.md`), with errors that name the socket.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuslice_api::protocol::SOCKET_NAME;
use gpuslice_api::{Request, RequestEnvelope, Response, ResponseEnvelope};

/// Why talking to the arbiter failed.
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
    /// The connection broke or the reply was not understood.
    #[error("arbiter at {path}: {message}")]
    Protocol {
        /// The socket.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// The arbiter is down when its socket is missing (it removes it when it stops) or refuses
/// connections (it was killed and left the socket file); anything else is said as it is.
fn unreachable(path: &Path, cause: &io::Error) -> String {
    const HINT: &str = "start it (systemctl start gpuslice-arbiter), or name another state directory with --state-dir / GPUSLICE_STATE_DIR";
    match cause.kind() {
        io::ErrorKind::NotFound => {
            format!("the arbiter is not running: no socket at {}; {HINT}", path.display())
        }
        io::ErrorKind::ConnectionRefused => format!(
            "the arbiter is not running: {} refuses connections (a socket left by a killed arbiter); {HINT}",
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

impl Client {
    /// Connects to `<state_dir>/arbiter.sock`.
    pub fn connect(state_dir: &Path) -> Result<Client, ClientError> {
        Client::connect_socket(&state_dir.join(SOCKET_NAME))
    }

    /// Connects to the socket at `path`.
    pub fn connect_socket(path: &Path) -> Result<Client, ClientError> {
        let s = UnixStream::connect(path).map_err(|cause| ClientError::Unreachable {
            path: path.to_path_buf(),
            cause,
        })?;
        let proto = |e: io::Error| ClientError::Protocol {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(proto)?;
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

    /// Sends one request and reads its response.
    pub fn call(&mut self, request: Request) -> Result<Response, ClientError> {
        let err = |message: String| ClientError::Protocol {
            path: self.path.clone(),
            message,
        };
        let mut line =
            serde_json::to_vec(&RequestEnvelope::new(request)).map_err(|e| err(e.to_string()))?;
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .map_err(|e| err(format!("sending: {e}")))?;
        let mut reply = String::new();
        let n = self
            .reader
            .read_line(&mut reply)
            .map_err(|e| err(format!("reading the reply: {e}")))?;
        if n == 0 {
            return Err(err("closed the connection without a reply".into()));
        }
        let env: ResponseEnvelope = serde_json::from_str(&reply)
            .map_err(|e| err(format!("unreadable reply ({e}): {}", reply.trim_end())))?;
        Ok(env.response)
    }
}
