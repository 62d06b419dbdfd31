//! NodePrepareResources / NodeUnprepareResources, independent of gRPC: per claim, read it,
//! plan it ([`crate::dra::plan`]), check it against what this node published, checkpoint it, admit its
//! slice on exactly the allocated GPU, write its CDI spec, return the CDI device ids. Each claim
//! succeeds or fails alone; a failure undoes what that call did (slice, CDI spec, checkpoint
//! entry) and says so. Idempotent: a claim already in the checkpoint is completed from the
//! recorded plan (kubelet retries, plugin restarts).

use crate::policysource::PolicySource;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use gpuslice_admission::fit::Policy;
use gpuslice_api::MemoryRequest;

use crate::capacity::{self, Offer, PublishPolicy};
use crate::dra::arbiter::Arbiter;
use crate::dra::cdi::ClaimCdi;
use crate::dra::checkpoint::{Checkpoint, CheckpointError, Entry, Stage};
use crate::dra::claim::{ClaimRef, ClaimSource, SourceError};
use crate::dra::plan::{self, Plan};
use crate::gpu::{Gpu, GpuSource};

/// Why a claim was not prepared or unprepared. Every message names the claim (and its device
/// once planned) and goes to kubelet as it is; one that failed after admission began also says
/// what was undone or what was left behind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// The claim is not at the API server (deleted meanwhile?): nothing was done.
    #[error("{0}")]
    NotFound(String),
    /// The node's GPUs or the claim could not be read: nothing was done.
    #[error("{0}")]
    Unreadable(String),
    /// The claim is not one this node can prepare (another claim under its name, not allocated
    /// here, a bad configuration, more than a device's published capacity): nothing was done.
    #[error("{0}")]
    Plan(String),
    /// The claim with those already prepared on its GPU exceeds what this node published, or
    /// its GPU is gone: nothing was done.
    #[error("{0}")]
    Capacity(String),
    /// The checkpoint could not be written.
    #[error("{0}")]
    Checkpoint(String),
    /// Admitting the slice or writing its CDI spec failed (what was undone follows).
    #[error("{0}")]
    Prepare(String),
    /// Releasing the slice or removing its CDI spec failed.
    #[error("{0}")]
    Unprepare(String),
}

/// A prepared claim's device, as kubelet gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedDevice {
    /// The claim's request it serves.
    pub request: String,
    /// Pool.
    pub pool: String,
    /// Device.
    pub device: String,
    /// CDI device ids.
    pub cdi_device_ids: Vec<String>,
}

/// What the driver needs.
pub struct Parts {
    /// This node's name (= pool name).
    pub node: String,
    /// The GPUs.
    pub gpus: Arc<dyn GpuSource>,
    /// The arbiter's admission policy (from the node configuration).
    pub policy: Policy,
    /// What is published per GPU.
    pub publish: PublishPolicy,
    /// ResourceClaims.
    pub claims: Arc<dyn ClaimSource>,
    /// The arbiter.
    pub arbiter: Arc<dyn Arbiter>,
    /// CDI specs.
    pub cdi: Arc<dyn ClaimCdi>,
    /// The checkpoint file.
    pub checkpoint: PathBuf,
}

/// The driver's node side.
pub struct Driver {
    parts: Parts,
    state: Mutex<Checkpoint>,
    /// The policy prepare checks offers with: `parts.policy`, or the arbiter's as it changes
    /// ([`Driver::following`]).
    policy: Arc<PolicySource>,
}

/// The slice id of a claim.
pub fn slice_id(claim_uid: &str) -> String {
    format!("{}{claim_uid}", gpuslice_api::protocol::DRA_SLICE_PREFIX)
}

impl Driver {
    /// Starts from the checkpoint on disk (claims prepared by an earlier run are kept).
    pub fn new(parts: Parts) -> Result<Driver, CheckpointError> {
        let state = Checkpoint::load(&parts.checkpoint)?;
        let policy = Arc::new(PolicySource::fixed(parts.policy.clone()));
        Ok(Driver {
            parts,
            state: Mutex::new(state),
            policy,
        })
    }

    /// This driver checking offers with `policy` as it is at each prepare (the publisher's
    /// source, so what is prepared is what is published).
    pub fn following(mut self, policy: Arc<PolicySource>) -> Driver {
        self.policy = policy;
        self
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.parts.node
    }

    fn lock(&self) -> MutexGuard<'_, Checkpoint> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the checkpoint as it is now.
    pub fn checkpoint(&self) -> Checkpoint {
        self.lock().clone()
    }

    /// Prepares every claim; one result per claim UID.
    pub fn prepare(
        &self,
        claims: &[ClaimRef],
    ) -> BTreeMap<String, Result<Vec<PreparedDevice>, ClaimError>> {
        claims
            .iter()
            .map(|c| {
                let r = self.prepare_one(c);
                match &r {
                    Ok(d) => tracing::info!(claim = %c, devices = ?d, "prepared"),
                    Err(e) => tracing::warn!("prepare failed: {e}"),
                }
                (c.uid.clone(), r)
            })
            .collect()
    }

    /// Unprepares every claim; one result per claim UID.
    pub fn unprepare(&self, claims: &[ClaimRef]) -> BTreeMap<String, Result<(), ClaimError>> {
        claims
            .iter()
            .map(|c| {
                let r = self.unprepare_one(c);
                match &r {
                    Ok(()) => tracing::info!(claim = %c, "unprepared"),
                    Err(e) => tracing::warn!("unprepare failed: {e}"),
                }
                (c.uid.clone(), r)
            })
            .collect()
    }

    fn offers(&self, c: &ClaimRef) -> Result<Vec<(Gpu, Offer)>, ClaimError> {
        let gpus = self
            .parts
            .gpus
            .gpus()
            .map_err(|e| ClaimError::Unreadable(format!("{c}: {e}")))?;
        let policy = self.policy.current();
        Ok(gpus
            .into_iter()
            .map(|g| {
                let o = capacity::offer(&policy, &self.parts.publish, &g.info);
                (g, o)
            })
            .collect())
    }

    fn prepare_one(&self, c: &ClaimRef) -> Result<Vec<PreparedDevice>, ClaimError> {
        let mut state = self.lock();
        let offers = self.offers(c)?;
        let (plan, fresh) = match state.claims.get(&c.uid) {
            // Kubelet asks again for a claim it was given: the same answer, nothing touched.
            Some(e) if e.stage == Stage::Prepared => {
                return Ok(vec![device_of(&e.plan, e.cdi_device_ids.clone())]);
            }
            // Begun by an earlier call or an earlier run of the plugin: finish it.
            Some(e) => (e.plan.clone(), false),
            None => (self.plan_fresh(c, &state, &offers)?, true),
        };
        let dev = format!("{c}: device {}", plan.device);
        let gpu = offers
            .iter()
            .map(|(g, _)| g)
            .find(|g| g.info.uuid == plan.uuid)
            .cloned()
            .ok_or_else(|| {
                ClaimError::Capacity(format!(
                    "{dev}: GPU {} is no longer on this node",
                    plan.uuid
                ))
            })?;
        if fresh {
            self.record_preparing(&mut state, c, &plan, &dev)?;
        }
        let ids = self.admit_and_describe(&mut state, c, &plan, &gpu, &dev)?;
        Ok(vec![device_of(&plan, ids)])
    }

    /// Reads claim `c` from the API server and plans it on this node's `offers`, checking
    /// that it fits beside the claims already held.
    fn plan_fresh(
        &self,
        c: &ClaimRef,
        state: &Checkpoint,
        offers: &[(Gpu, Offer)],
    ) -> Result<Plan, ClaimError> {
        let claim = self
            .parts
            .claims
            .get(&c.namespace, &c.name)
            .map_err(|e| match e {
                SourceError::NotFound => ClaimError::NotFound(format!(
                    "{c}: not found at the API server (deleted meanwhile?)"
                )),
                e => ClaimError::Unreadable(format!("{c}: reading it: {e}")),
            })?;
        let plan = plan::plan(c, &claim, &self.parts.node, offers)
            .map_err(|e| ClaimError::Plan(e.to_string()))?;
        fits(c, &plan, state, offers)?;
        Ok(plan)
    }

    /// Checkpoints claim `c` as being prepared before anything is admitted, so that a crash
    /// from here on is finished or undone by the next run.
    fn record_preparing(
        &self,
        state: &mut Checkpoint,
        c: &ClaimRef,
        plan: &Plan,
        dev: &str,
    ) -> Result<(), ClaimError> {
        state.claims.insert(
            c.uid.clone(),
            Entry {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                stage: Stage::Preparing,
                plan: plan.clone(),
                cdi_device_ids: Vec::new(),
            },
        );
        if let Err(e) = state.save(&self.parts.checkpoint) {
            state.claims.remove(&c.uid);
            return Err(ClaimError::Checkpoint(format!(
                "{dev}: {e}; nothing was admitted"
            )));
        }
        Ok(())
    }

    /// Admits claim `c`'s slice on `gpu`, writes its CDI spec and checkpoints it prepared;
    /// returns the CDI device IDs. A failure undoes everything the claim holds.
    fn admit_and_describe(
        &self,
        state: &mut Checkpoint,
        c: &ClaimRef,
        plan: &Plan,
        gpu: &Gpu,
        dev: &str,
    ) -> Result<Vec<String>, ClaimError> {
        let id = slice_id(&c.uid);
        let admitted = match self.parts.arbiter.admit(&id, &plan.slice) {
            Ok(a) => a,
            Err(e) => {
                return Err(ClaimError::Prepare(self.undo(
                    state,
                    c,
                    format!("{dev}: {e}"),
                )))
            }
        };
        if admitted.devices.len() != 1 || admitted.devices[0].uuid != plan.uuid {
            let got: Vec<&str> = admitted.devices.iter().map(|d| d.uuid.as_str()).collect();
            return Err(ClaimError::Prepare(self.undo(
                state,
                c,
                format!(
                    "{dev}: the arbiter placed slice {id} on {got:?}, not on {}",
                    plan.uuid
                ),
            )));
        }
        let ids = match self.parts.cdi.write(&c.uid, gpu, &admitted.slice_dir) {
            Ok(ids) => ids,
            Err(e) => {
                return Err(ClaimError::Prepare(self.undo(
                    state,
                    c,
                    format!("{dev}: CDI spec: {e}"),
                )))
            }
        };
        if let Some(e) = state.claims.get_mut(&c.uid) {
            e.stage = Stage::Prepared;
            e.cdi_device_ids = ids.clone();
        }
        if let Err(e) = state.save(&self.parts.checkpoint) {
            return Err(ClaimError::Checkpoint(self.undo(
                state,
                c,
                format!("{dev}: {e}"),
            )));
        }
        Ok(ids)
    }

    /// Undoes everything claim `c` holds (slice, CDI spec, checkpoint entry) after a failure
    /// `why`; returns `why` with what could not be undone.
    fn undo(&self, state: &mut Checkpoint, c: &ClaimRef, why: String) -> String {
        let id = slice_id(&c.uid);
        let mut notes = Vec::new();
        if let Err(e) = self.parts.arbiter.release(&id) {
            notes.push(format!("slice {id} NOT released: {e}"));
        }
        if let Err(e) = self.parts.cdi.remove(&c.uid) {
            notes.push(format!("CDI spec NOT removed: {e}"));
        }
        state.claims.remove(&c.uid);
        if let Err(e) = state.save(&self.parts.checkpoint) {
            notes.push(format!("{e}"));
        }
        if notes.is_empty() {
            format!("{why}; nothing was left behind")
        } else {
            format!("{why}; {}", notes.join("; "))
        }
    }

    fn unprepare_one(&self, c: &ClaimRef) -> Result<(), ClaimError> {
        let mut state = self.lock();
        let id = slice_id(&c.uid);
        let what = match state.claims.get(&c.uid) {
            Some(e) => format!("{c}: device {}", e.plan.device),
            None => c.to_string(),
        };
        // Release and remove even without an entry: both are idempotent, and a plugin that
        // lost its checkpoint must not leak the slice.
        self.parts
            .arbiter
            .release(&id)
            .map_err(|e| ClaimError::Unprepare(format!("{what}: releasing slice {id}: {e}")))?;
        self.parts
            .cdi
            .remove(&c.uid)
            .map_err(|e| ClaimError::Unprepare(format!("{what}: removing the CDI spec: {e}")))?;
        if state.claims.remove(&c.uid).is_some() {
            state
                .save(&self.parts.checkpoint)
                .map_err(|e| ClaimError::Checkpoint(format!("{what}: {e}")))?;
        }
        Ok(())
    }
}

fn device_of(plan: &Plan, cdi_device_ids: Vec<String>) -> PreparedDevice {
    PreparedDevice {
        request: plan.request.clone(),
        pool: plan.pool.clone(),
        device: plan.device.clone(),
        cdi_device_ids,
    }
}

/// The claim with what this node already prepared on the same GPU stays within what it
/// published (the scheduler's own rule; a claim beyond it was not allocated by a scheduler that
/// saw our slice).
fn fits(
    c: &ClaimRef,
    plan: &Plan,
    state: &Checkpoint,
    offers: &[(Gpu, Offer)],
) -> Result<(), ClaimError> {
    let Some((_, offer)) = offers.iter().find(|(g, _)| g.info.uuid == plan.uuid) else {
        return Ok(());
    };
    let bytes = |p: &Plan| match p.slice.memory {
        Some(MemoryRequest::Bytes(b)) => b,
        _ => 0,
    };
    let others: Vec<&Plan> = state
        .claims
        .iter()
        .filter(|(uid, e)| **uid != c.uid && e.plan.uuid == plan.uuid)
        .map(|(_, e)| &e.plan)
        .collect();
    let dev = format!("{c}: device {}", plan.device);
    if others.len() >= offer.slices as usize {
        return Err(ClaimError::Capacity(format!(
            "{dev}: capacity slices: {} claims are prepared on it, its published capacity is {}",
            others.len(),
            offer.slices
        )));
    }
    let memory: u64 = others.iter().map(|p| bytes(p)).sum::<u64>() + bytes(plan);
    if memory > offer.memory {
        return Err(ClaimError::Capacity(format!(
            "{dev}: consumedCapacity.memory: {} with the claims prepared on it is {memory}, above its published memory {}",
            bytes(plan),
            offer.memory
        )));
    }
    let compute: u64 = others
        .iter()
        .chain(std::iter::once(&plan))
        .map(|p| u64::from(p.slice.compute.unwrap_or(0)))
        .sum();
    if compute > offer.compute {
        return Err(ClaimError::Capacity(format!(
            "{dev}: consumedCapacity.compute: {} with the claims prepared on it is {compute}, above its published compute {}",
            plan.slice.compute.unwrap_or(0),
            offer.compute
        )));
    }
    Ok(())
}
