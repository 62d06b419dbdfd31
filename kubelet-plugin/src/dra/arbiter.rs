//! The arbiter as the driver uses it: admit a claim's slice on exactly its device, release it.
//! [`SocketArbiter`] talks to the real daemon through the shared client
//! ([`gpuslice_api::client`]); tests substitute their own [`Arbiter`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuslice_api::client::Client;
use gpuslice_api::{AssignedDevice, Owner, SliceRequest};

/// An admitted slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// Its directory on the host (mounted at `/run/gpuslice` in the containers).
    pub slice_dir: PathBuf,
    /// Where the arbiter placed it.
    pub devices: Vec<AssignedDevice>,
    /// It already existed with the same request (a retry).
    pub existing: bool,
}

/// An arbiter failure, as a sentence (the arbiter's own, which names the constraint).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("arbiter: {0}")]
pub struct ArbiterError(pub String);

/// Admission and release of slices.
pub trait Arbiter: Send + Sync {
    /// Admits `slice_id` (idempotent for the same request).
    fn admit(&self, slice_id: &str, request: &SliceRequest) -> Result<Admitted, ArbiterError>;
    /// Releases `slice_id`; `Ok(false)` when it was already gone.
    fn release(&self, slice_id: &str) -> Result<bool, ArbiterError>;
}

/// The arbiter daemon at `<state_dir>/arbiter.sock`, one connection per call.
#[derive(Clone, Debug)]
pub struct SocketArbiter {
    state_dir: PathBuf,
    timeout: Duration,
}

impl SocketArbiter {
    /// The arbiter of `state_dir`, each call bounded by `timeout`.
    pub fn new(state_dir: &Path, timeout: Duration) -> Self {
        SocketArbiter {
            state_dir: state_dir.to_path_buf(),
            timeout,
        }
    }

    fn client(&self) -> Result<Client, ArbiterError> {
        Client::connect(&self.state_dir, self.timeout).map_err(|e| ArbiterError(e.to_string()))
    }
}

impl Arbiter for SocketArbiter {
    fn admit(&self, slice_id: &str, request: &SliceRequest) -> Result<Admitted, ArbiterError> {
        // No pid or cgroup: the slice belongs to the claim (every container of the Pod shares
        // it) and the arbiter keeps it until NodeUnprepareResources releases it.
        let a = self
            .client()?
            .admit(slice_id, request.clone(), Owner::default())
            .map_err(|e| ArbiterError(e.to_string()))?;
        Ok(Admitted {
            slice_dir: a.slice_dir,
            devices: a.devices,
            existing: a.existing,
        })
    }

    fn release(&self, slice_id: &str) -> Result<bool, ArbiterError> {
        self.client()?
            .release(slice_id)
            .map_err(|e| ArbiterError(e.to_string()))
    }
}
