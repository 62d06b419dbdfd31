//! Admission state: the admitted slices and where they are placed. Admit, update, release and
//! restore, each all-or-nothing: a refused operation leaves the state unchanged. Pure logic; the
//! daemon adds persistence and the control socket.

use std::collections::BTreeMap;

use gpuslice_api::protocol::{is_dra_slice, valid_slice_id};
use gpuslice_api::quantity::format_bytes;
use gpuslice_api::{
    AssignedDevice, DeviceRef, DeviceSelector, DeviceStatus, ErrorCode, ForeignProcess,
    MemoryRequest, NodeStatus, Owner, Placement, Priority, RequestError, SliceRequest, SliceStatus,
};

use crate::fit::{best_effort_share, check, Ask, Constraint, DeviceRefusal, Load, Policy, Refusal};
use crate::inventory::DeviceInfo;
use crate::placement::{choose, Candidate};

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    /// The request itself is malformed.
    #[error("{0}")]
    Invalid(#[from] RequestError),
    /// The slice id is not acceptable.
    #[error("slice id \"{0}\" is not valid (1-128 characters of A-Z a-z 0-9 _ - ., not starting with . nor ending in .sock)")]
    BadSliceId(String),
    /// The request does not fit.
    #[error("slice \"{id}\" refused: {refusal}")]
    Refused {
        /// The slice id.
        id: String,
        /// Why.
        refusal: Refusal,
    },
    /// No such slice.
    #[error("no slice \"{0}\"")]
    NotFound(String),
    /// The id is taken by a slice with a different request.
    #[error("slice \"{0}\" already exists with a different request")]
    Conflict(String),
    /// A restored record names a device the node no longer has.
    #[error("slice \"{id}\": device {uuid} is not on this node")]
    MissingDevice {
        /// The slice id.
        id: String,
        /// The device.
        uuid: String,
    },
}

impl AdmitError {
    /// The protocol error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            AdmitError::Invalid(_) | AdmitError::BadSliceId(_) => ErrorCode::BadRequest,
            AdmitError::Refused { .. } | AdmitError::MissingDevice { .. } => ErrorCode::Refused,
            AdmitError::NotFound(_) => ErrorCode::NotFound,
            AdmitError::Conflict(_) => ErrorCode::Conflict,
        }
    }
}

/// What admitted slices hold now, as measured: bytes slice `id` holds on device `uuid` (0 when
/// unknown). The daemon reads each slice's `usage` file; tests pass a closure. Admission asks it
/// only about best-effort slices, before lowering their effective caps.
pub trait Holdings {
    /// Bytes slice `id` holds on device `uuid`.
    fn held(&self, id: &str, uuid: &str) -> u64;
}

impl<F: Fn(&str, &str) -> u64> Holdings for F {
    fn held(&self, id: &str, uuid: &str) -> u64 {
        self(id, uuid)
    }
}

/// Nothing held anywhere (a node without region files: the kubelet plugin's model, tests).
const NOTHING_HELD: &dyn Holdings = &|_: &str, _: &str| 0u64;

/// A change to a running slice; `None` fields are unchanged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// New memory cap.
    pub memory: Option<MemoryRequest>,
    /// New guarantee; `Some(0)` = best effort.
    pub compute: Option<u8>,
    /// New ceiling.
    pub compute_limit: Option<u8>,
    /// New priority.
    pub priority: Option<Priority>,
}

/// The result of a successful admit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The assignment.
    pub devices: Vec<AssignedDevice>,
    /// True when the slice was already admitted with the same request.
    pub existing: bool,
}

/// The result of a successful update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Updated {
    /// The assignment after the update.
    pub devices: Vec<AssignedDevice>,
    /// Things to tell the user (cap below current use).
    pub warnings: Vec<String>,
}

/// The node's admitted slices.
#[derive(Clone, Debug)]
pub struct Admission {
    policy: Policy,
    devices: Vec<DeviceInfo>,
    slices: BTreeMap<String, SliceStatus>,
    /// CUDA processes outside gpuslice, as the backstop last saw them: their devices take no
    /// new slice ([`Self::set_foreign`]).
    foreign: Vec<ForeignProcess>,
}

/// Slice `id` refused for `refusal`.
fn refused(id: &str, refusal: Refusal) -> AdmitError {
    AdmitError::Refused {
        id: id.to_string(),
        refusal,
    }
}

impl Admission {
    /// An empty node with `devices`.
    pub fn new(devices: Vec<DeviceInfo>, policy: Policy) -> Self {
        Admission {
            policy,
            devices,
            slices: BTreeMap::new(),
            foreign: Vec::new(),
        }
    }

    /// Records the CUDA processes outside gpuslice on the node's devices (the backstop's last
    /// check). A device with any is foreign-owned: admits place nothing there, and an admit
    /// that lists it is refused naming them. Slices already there are left as they are (they
    /// were there first); updates of them are not refused for it.
    pub fn set_foreign(&mut self, list: Vec<ForeignProcess>) {
        self.foreign = list;
    }

    /// The CUDA processes outside gpuslice, as last recorded.
    pub fn foreign(&self) -> &[ForeignProcess] {
        &self.foreign
    }

    /// [`Self::fits`] for a new slice: a foreign-owned device takes none, whatever else fits.
    fn admits(
        &self,
        pos: usize,
        id: &str,
        ask: Ask,
        model: Option<&str>,
        holdings: &dyn Holdings,
    ) -> Result<(), DeviceRefusal> {
        let fitted = self.fits(pos, id, self.load(pos, None), ask, model, holdings);
        let dev = &self.devices[pos];
        let processes: Vec<(u32, String)> = self
            .foreign
            .iter()
            .filter(|f| f.device == dev.index)
            .map(|f| (f.pid, f.comm.clone()))
            .collect();
        if processes.is_empty() {
            return fitted;
        }
        let mut refusal = fitted.err().unwrap_or_else(|| DeviceRefusal {
            index: dev.index,
            uuid: dev.uuid.clone(),
            failed: Vec::new(),
        });
        refusal.failed.insert(0, Constraint::Foreign { processes });
        Err(refusal)
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The node's devices.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    /// One admitted slice.
    pub fn slice(&self, id: &str) -> Option<&SliceStatus> {
        self.slices.get(id)
    }

    /// Every admitted slice, by id.
    pub fn slices(&self) -> impl Iterator<Item = &SliceStatus> {
        self.slices.values()
    }

    /// What is promised on device `pos`, leaving out slice `except`.
    pub fn load(&self, pos: usize, except: Option<&str>) -> Load {
        let Some(dev) = self.devices.get(pos) else {
            return Load::default();
        };
        let mut load = Load::default();
        for s in self.slices.values() {
            if Some(s.slice_id.as_str()) == except {
                continue;
            }
            for a in s.devices.iter().filter(|a| a.uuid == dev.uuid) {
                load.memory_committed = load
                    .memory_committed
                    .saturating_add(self.policy.commitment_on(dev.index, a.memory_cap));
                load.best_effort += u64::from(a.memory_cap.is_none());
                load.compute_guaranteed += u32::from(s.request.compute.unwrap_or(0));
            }
        }
        load
    }

    /// What `request` asks of `dev`. A percentage is of the device's total, but never more
    /// than one slice can be promised there (the total less its context reserve): `100%` means
    /// the whole promisable GPU instead of a cap that could never be admitted.
    fn ask(&self, request: &SliceRequest, dev: &DeviceInfo) -> Ask {
        let promisable = dev
            .memory_total
            .saturating_sub(self.policy.reserve_on(dev.index))
            .max(1);
        Ask {
            cap: request.memory.map(|m| match m {
                MemoryRequest::Percent(_) => m.resolve(dev.memory_total).min(promisable),
                MemoryRequest::Bytes(_) => m.resolve(dev.memory_total),
            }),
            compute: request.compute.unwrap_or(0),
        }
    }

    fn assigned(dev: &DeviceInfo, ask: Ask) -> AssignedDevice {
        AssignedDevice {
            index: dev.index,
            uuid: dev.uuid.clone(),
            name: dev.name.clone(),
            memory_total: dev.memory_total,
            memory_cap: ask.cap,
            // Set by `rebalance` once the slice is in place.
            memory_best_effort: None,
        }
    }

    /// The effective cap of every best-effort slice on device `pos` now (`None`: none there,
    /// or `overcommit_memory`, where they are not bounded).
    pub fn best_effort_cap(&self, pos: usize) -> Option<u64> {
        let dev = self.devices.get(pos)?;
        if self.policy.overcommit_memory {
            return None;
        }
        let load = self.load(pos, None);
        best_effort_share(dev.memory_total, load.memory_committed, load.best_effort)
    }

    /// Writes each best-effort slice's effective cap into its assignments (`memory_best_effort`),
    /// after any change on the node.
    fn rebalance(&mut self) {
        for pos in 0..self.devices.len() {
            let share = self.best_effort_cap(pos);
            let uuid = self.devices[pos].uuid.clone();
            for s in self.slices.values_mut() {
                for a in s.devices.iter_mut().filter(|a| a.uuid == uuid) {
                    a.memory_best_effort = if a.memory_cap.is_none() { share } else { None };
                }
            }
        }
    }

    /// Whether placing `ask` for slice `id` on device `pos` (carrying `load`, without `id`)
    /// would lower the effective cap of a best-effort slice there below what it holds now.
    fn squeeze(
        &self,
        pos: usize,
        id: &str,
        load: Load,
        ask: Ask,
        holdings: &dyn Holdings,
    ) -> Option<Constraint> {
        let dev = self.devices.get(pos)?;
        let before = self.best_effort_cap(pos)?;
        let committed = load
            .memory_committed
            .saturating_add(self.policy.commitment_on(dev.index, ask.cap));
        if committed > dev.memory_total {
            return None; // refused for memory already
        }
        let after = best_effort_share(
            dev.memory_total,
            committed,
            load.best_effort + u64::from(ask.cap.is_none()),
        )?;
        if after >= before {
            return None;
        }
        let held: Vec<(String, u64)> = self
            .slices
            .values()
            .filter(|s| s.slice_id != id)
            .filter(|s| {
                s.devices
                    .iter()
                    .any(|a| a.uuid == dev.uuid && a.memory_cap.is_none())
            })
            .map(|s| (s.slice_id.clone(), holdings.held(&s.slice_id, &dev.uuid)))
            .filter(|&(_, h)| h > after)
            .collect();
        (!held.is_empty()).then_some(Constraint::BestEffortHeld { share: after, held })
    }

    /// [`check`] plus [`Self::squeeze`]: every reason device `pos` cannot take `ask` for `id`.
    fn fits(
        &self,
        pos: usize,
        id: &str,
        load: Load,
        ask: Ask,
        model: Option<&str>,
        holdings: &dyn Holdings,
    ) -> Result<(), DeviceRefusal> {
        let dev = &self.devices[pos];
        let checked = check(&self.policy, dev, load, ask, model);
        let Some(c) = self.squeeze(pos, id, load, ask, holdings) else {
            return checked;
        };
        let mut refusal = checked.err().unwrap_or_else(|| DeviceRefusal {
            index: dev.index,
            uuid: dev.uuid.clone(),
            failed: Vec::new(),
        });
        // In the order model, memory, compute.
        let at = refusal
            .failed
            .iter()
            .position(|f| matches!(f, Constraint::Compute { .. }))
            .unwrap_or(refusal.failed.len());
        refusal.failed.insert(at, c);
        Err(refusal)
    }

    fn find(&self, r: &DeviceRef) -> Option<usize> {
        self.devices.iter().position(|d| match r {
            DeviceRef::Index(i) => d.index == *i,
            DeviceRef::Uuid(u) => d.uuid.eq_ignore_ascii_case(u),
        })
    }

    /// Admits slice `id`, placing it by the policy, as if no best-effort slice held memory
    /// ([`Self::admit_holding`]).
    pub fn admit(
        &mut self,
        id: &str,
        request: SliceRequest,
        owner: Owner,
    ) -> Result<Admitted, AdmitError> {
        self.admit_holding(id, request, owner, NOTHING_HELD)
    }

    /// The positions of the devices `list` names, each checked to admit the slice.
    fn listed(
        &self,
        id: &str,
        list: &[DeviceRef],
        request: &SliceRequest,
        model: Option<&str>,
        holdings: &dyn Holdings,
    ) -> Result<Vec<usize>, AdmitError> {
        let refused = |refusal| refused(id, refusal);
        let mut positions = Vec::with_capacity(list.len());
        for r in list {
            let pos = self
                .find(r)
                .ok_or_else(|| refused(Refusal::UnknownDevice(r.clone())))?;
            if positions.contains(&pos) {
                // `0,GPU-of-device-0`: the same device twice under two names.
                return Err(AdmitError::Invalid(RequestError::new(
                    gpuslice_api::request::keys::DEVICES,
                    &request.devices,
                    format!("device {r} is listed twice"),
                )));
            }
            let dev = &self.devices[pos];
            self.admits(pos, id, self.ask(request, dev), model, holdings)
                .map_err(|d| refused(Refusal::ListedDeviceFull(d)))?;
            positions.push(pos);
        }
        Ok(positions)
    }

    /// The positions of `n` devices that admit the slice, chosen by the placement policy.
    fn counted(
        &self,
        id: &str,
        n: u32,
        request: &SliceRequest,
        model: Option<&str>,
        holdings: &dyn Holdings,
    ) -> Result<Vec<usize>, AdmitError> {
        let refused = |refusal| refused(id, refusal);
        let n = n as usize;
        let mut fits = Vec::new();
        let mut misses = Vec::new();
        for (pos, dev) in self.devices.iter().enumerate() {
            let load = self.load(pos, None);
            let ask = self.ask(request, dev);
            match self.admits(pos, id, ask, model, holdings) {
                Ok(()) => {
                    let mut c = Candidate::new(&self.policy, pos, dev, load, ask);
                    if ask.cap.is_none() {
                        // What it would get there: its share of the pool.
                        let committed = load
                            .memory_committed
                            .saturating_add(self.policy.reserve_on(dev.index));
                        let share =
                            best_effort_share(dev.memory_total, committed, load.best_effort + 1);
                        c.memory_left = i128::from(share.unwrap_or(0));
                    }
                    fits.push(c)
                }
                Err(d) => misses.push(d),
            }
        }
        if fits.len() < n {
            return Err(refused(Refusal::NotEnoughDevices {
                wanted: n,
                fit: fits.len(),
                devices: misses,
            }));
        }
        // A best-effort slice commits only its reserve, so it leaves the holes bin-pack
        // keeps for large caps as they were; it goes where its share is largest.
        let placement = if request.memory.is_none() {
            Placement::Spread
        } else {
            self.policy.placement
        };
        Ok(choose(placement, fits, n))
    }

    /// Admits slice `id`, placing it by the policy. Repeating an admit with the same request
    /// returns the existing assignment. A device where the slice would leave a best-effort
    /// slice an effective cap below what it holds (`holdings`) does not fit.
    pub fn admit_holding(
        &mut self,
        id: &str,
        request: SliceRequest,
        owner: Owner,
        holdings: &dyn Holdings,
    ) -> Result<Admitted, AdmitError> {
        if !valid_slice_id(id) {
            return Err(AdmitError::BadSliceId(id.to_string()));
        }
        request.validate()?;
        if self.policy.dra_only && !is_dra_slice(id, &owner) {
            return Err(AdmitError::Refused {
                id: id.to_string(),
                refusal: Refusal::DraOnly,
            });
        }
        if let Some(existing) = self.slices.get(id) {
            return if existing.request == request {
                Ok(Admitted {
                    devices: existing.devices.clone(),
                    existing: true,
                })
            } else {
                Err(AdmitError::Conflict(id.to_string()))
            };
        }
        let refused = |refusal| refused(id, refusal);
        if self.devices.is_empty() {
            return Err(refused(Refusal::NoDevices));
        }
        let model = request.model.as_deref();
        let positions = match &request.devices {
            DeviceSelector::List(list) => self.listed(id, list, &request, model, holdings)?,
            DeviceSelector::Count(n) => self.counted(id, *n, &request, model, holdings)?,
        };
        let devices: Vec<AssignedDevice> = positions
            .iter()
            .map(|&p| {
                let dev = &self.devices[p];
                Self::assigned(dev, self.ask(&request, dev))
            })
            .collect();
        self.slices.insert(
            id.to_string(),
            SliceStatus {
                slice_id: id.to_string(),
                request,
                owner,
                devices,
            },
        );
        self.rebalance();
        Ok(Admitted {
            devices: self.slices[id].devices.clone(),
            existing: false,
        })
    }

    /// [`Self::update_holding`] where only slice `id` is known to hold memory (`used`: bytes by
    /// device UUID, as measured).
    pub fn update(
        &mut self,
        id: &str,
        change: &Change,
        used: &BTreeMap<String, u64>,
    ) -> Result<Updated, AdmitError> {
        let holdings = |s: &str, uuid: &str| {
            if s == id {
                used.get(uuid).copied().unwrap_or(0)
            } else {
                0
            }
        };
        self.update_holding(id, change, &holdings)
    }

    /// Changes a slice in place (it is not moved). Memory and compute are checked on every
    /// device of the slice like an admit (best-effort neighbours included); a cap below what
    /// the slice uses now (`holdings`, as measured) is accepted with a warning.
    pub fn update_holding(
        &mut self,
        id: &str,
        change: &Change,
        holdings: &dyn Holdings,
    ) -> Result<Updated, AdmitError> {
        let slice = self
            .slices
            .get(id)
            .ok_or_else(|| AdmitError::NotFound(id.to_string()))?;
        // The scheduler accounted this cap and guarantee from the claim: changing them here
        // would make its sums differ from ours.
        if self.policy.dra_only && (change.memory.is_some() || change.compute.is_some()) {
            return Err(AdmitError::Refused {
                id: id.to_string(),
                refusal: Refusal::DraAccounted,
            });
        }
        let mut request = slice.request.clone();
        if let Some(m) = change.memory {
            request.memory = Some(m);
        }
        match change.compute {
            Some(0) => request.compute = None,
            Some(c) => request.compute = Some(c),
            None => {}
        }
        if let Some(l) = change.compute_limit {
            request.compute_limit = Some(l);
        }
        if let Some(p) = change.priority {
            request.priority = p;
        }
        request.validate()?;
        let mut devices = Vec::with_capacity(slice.devices.len());
        let mut warnings = Vec::new();
        for a in &slice.devices {
            let pos = self
                .devices
                .iter()
                .position(|d| d.uuid == a.uuid)
                .ok_or_else(|| AdmitError::MissingDevice {
                    id: id.to_string(),
                    uuid: a.uuid.clone(),
                })?;
            let dev = &self.devices[pos];
            let ask = self.ask(&request, dev);
            // The model constraint was checked at admission; an update cannot change it.
            self.fits(pos, id, self.load(pos, Some(id)), ask, None, holdings)
                .map_err(|d| AdmitError::Refused {
                    id: id.to_string(),
                    refusal: Refusal::UpdateDoesNotFit(d),
                })?;
            if let Some(cap) = ask.cap {
                let u = holdings.held(id, &dev.uuid);
                if u > cap {
                    warnings.push(format!(
                        "device {} ({}): new memory cap {} is below current use {}; new \
                         allocations fail until use drops below the cap",
                        dev.index,
                        dev.uuid,
                        format_bytes(cap),
                        format_bytes(u)
                    ));
                }
            }
            devices.push(Self::assigned(dev, ask));
        }
        let slice = self
            .slices
            .get_mut(id)
            .ok_or_else(|| AdmitError::NotFound(id.to_string()))?;
        slice.request = request;
        slice.devices = devices;
        self.rebalance();
        Ok(Updated {
            devices: self.slices[id].devices.clone(),
            warnings,
        })
    }

    /// Records the processes that run slice `id` (the container's init pid and cgroup). Fields
    /// left `None` keep their current value.
    pub fn bind(
        &mut self,
        id: &str,
        pid: Option<u32>,
        cgroup: Option<String>,
        pod: Option<gpuslice_api::PodRef>,
    ) -> Result<&SliceStatus, AdmitError> {
        let slice = self
            .slices
            .get_mut(id)
            .ok_or_else(|| AdmitError::NotFound(id.to_string()))?;
        if pid.is_some() {
            slice.owner.pid = pid;
        }
        if cgroup.is_some() {
            slice.owner.cgroup = cgroup;
        }
        if pod.is_some() {
            slice.owner.pod = pod;
        }
        Ok(slice)
    }

    /// Releases a slice, returning its record; the best-effort slices it shared devices with
    /// get their new effective caps.
    pub fn release(&mut self, id: &str) -> Result<SliceStatus, AdmitError> {
        let gone = self
            .slices
            .remove(id)
            .ok_or_else(|| AdmitError::NotFound(id.to_string()))?;
        self.rebalance();
        Ok(gone)
    }

    /// Re-inserts a slice admitted by an earlier run of the arbiter. Its devices are matched by
    /// UUID (indices and the cap of a percentage request are refreshed). A running tenant is
    /// never refused for capacity: if the node is now over-committed (e.g. the config changed)
    /// the slice is restored and a warning returned.
    pub fn restore(&mut self, mut record: SliceStatus) -> Result<Vec<String>, AdmitError> {
        let id = record.slice_id.clone();
        if !valid_slice_id(&id) {
            return Err(AdmitError::BadSliceId(id));
        }
        record.request.validate()?;
        if self.slices.contains_key(&id) {
            return Err(AdmitError::Conflict(id));
        }
        let mut warnings = Vec::new();
        for a in &mut record.devices {
            let pos = self
                .devices
                .iter()
                .position(|d| d.uuid == a.uuid)
                .ok_or_else(|| AdmitError::MissingDevice {
                    id: id.clone(),
                    uuid: a.uuid.clone(),
                })?;
            let dev = &self.devices[pos];
            let ask = self.ask(&record.request, dev);
            if let Err(d) = check(&self.policy, dev, self.load(pos, None), ask, None) {
                warnings.push(format!("slice \"{id}\" restored over capacity on {d}"));
            }
            *a = Self::assigned(dev, ask);
        }
        self.slices.insert(id, record);
        self.rebalance();
        Ok(warnings)
    }

    /// The node's bookkeeping, for `status`.
    pub fn status(&self) -> NodeStatus {
        let devices = self
            .devices
            .iter()
            .enumerate()
            .map(|(pos, d)| {
                let load = self.load(pos, None);
                DeviceStatus {
                    index: d.index,
                    uuid: d.uuid.clone(),
                    name: d.name.clone(),
                    memory_total: d.memory_total,
                    memory_committed: load.memory_committed,
                    compute_guaranteed: load.compute_guaranteed,
                    slices: self
                        .slices
                        .values()
                        .filter(|s| s.devices.iter().any(|a| a.uuid == d.uuid))
                        .map(|s| s.slice_id.clone())
                        .collect(),
                    shares: Vec::new(),
                    context: None,
                }
            })
            .collect();
        NodeStatus {
            devices,
            slices: self.slices.values().cloned().collect(),
            backstop: Vec::new(),
            processes: Vec::new(),
            foreign: self.foreign.clone(),
        }
    }
}
