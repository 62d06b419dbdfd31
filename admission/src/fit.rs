//! Whether a request fits one device: the constraints admission checks and the precise reasons
//! it gives when one fails.

use std::collections::BTreeMap;
use std::fmt;

use gpuslice_api::quantity::format_bytes;
use gpuslice_api::DeviceRef;

use crate::inventory::DeviceInfo;

/// Admission settings (from `[admission]` in the config file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Bin-pack or spread.
    pub placement: gpuslice_api::Placement,
    /// Skip memory checks.
    pub overcommit_memory: bool,
    /// Context charge per process on a device without its own ([`Policy::charges`]): the
    /// configured `admission.context_reserve`, bytes.
    pub context_reserve: u64,
    /// Each device's own per-process context charge, by NVML index, from its measured
    /// footprint ([`Policy::with_footprints`]); a device not listed is charged
    /// `context_reserve`.
    pub charges: BTreeMap<u32, u64>,
    /// The charge of a device not in `charges` when it is more than `context_reserve`: the
    /// assumed footprint plus the module allowance, for a device not measured yet (the kubelet
    /// plugin before the arbiter's first start); 0 = none ([`Policy::with_unmeasured`]).
    pub unmeasured: u64,
    /// Processes per slice that admission reserves context memory for.
    pub processes_per_slice: u32,
    /// Admit only the DRA kubelet plugin's slices (`[admission] dra_only`).
    pub dra_only: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::from(&gpuslice_api::config::AdmissionConfig::default())
    }
}

impl From<&gpuslice_api::config::AdmissionConfig> for Policy {
    fn from(c: &gpuslice_api::config::AdmissionConfig) -> Self {
        Policy {
            placement: c.placement,
            overcommit_memory: c.overcommit_memory,
            context_reserve: c.context_reserve.0,
            charges: BTreeMap::new(),
            unmeasured: 0,
            processes_per_slice: c.processes_per_slice,
            dra_only: c.dra_only,
        }
    }
}

impl Policy {
    /// This policy with each device's per-process context charge following the context
    /// footprint measured there — `(NVML index, footprint)` — a mixed node charging each
    /// device its own: the larger of the configured reserve and the footprint plus what
    /// lazily loaded modules may add (`module_allowance`). Configuration raises a charge,
    /// never lowers it below the measurement (`crate::contexts`).
    pub fn with_footprints(
        mut self,
        footprints: impl IntoIterator<Item = (u32, u64)>,
        module_allowance: u64,
    ) -> Policy {
        for (index, footprint) in footprints {
            let charge = self
                .context_reserve
                .max(footprint.saturating_add(module_allowance));
            self.charges.insert(index, charge);
        }
        self
    }

    /// This policy charging a device without a measurement `footprint` plus `module_allowance`
    /// (or the configured reserve, when larger).
    pub fn with_unmeasured(mut self, footprint: u64, module_allowance: u64) -> Policy {
        self.unmeasured = footprint.saturating_add(module_allowance);
        self
    }

    /// What each process is charged for its context on device `index`.
    pub fn charge_on(&self, index: u32) -> u64 {
        self.charges
            .get(&index)
            .copied()
            .unwrap_or(self.context_reserve.max(self.unmeasured))
    }

    /// The context reserve one slice holds on device `index`.
    pub fn reserve_on(&self, index: u32) -> u64 {
        self.charge_on(index)
            .saturating_mul(u64::from(self.processes_per_slice))
    }

    /// Memory a slice with `cap` commits on device `index`: the cap plus the context reserve
    /// there. A slice without a cap (best-effort memory) commits its context reserve only: it
    /// shares, best effort, what no capped slice was promised ([`best_effort_share`]).
    pub fn commitment_on(&self, index: u32, cap: Option<u64>) -> u64 {
        match cap {
            Some(c) => c.saturating_add(self.reserve_on(index)),
            None => self.reserve_on(index),
        }
    }
}

/// The effective cap of each of `best_effort` slices without a cap on a device of `total`
/// bytes carrying `committed` (every slice's commitment, theirs included): an equal split of
/// the *best-effort pool*, what is left once capped slices' caps and reserves and the
/// best-effort slices' own reserves are set aside. `None` when there is none to split.
pub fn best_effort_share(total: u64, committed: u64, best_effort: u64) -> Option<u64> {
    (best_effort > 0).then(|| total.saturating_sub(committed) / best_effort)
}

/// What is already promised on a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Sum of commitments (caps + reserves; a slice without a cap: its reserve), bytes.
    pub memory_committed: u64,
    /// Slices without a cap (best-effort memory) on the device.
    pub best_effort: u64,
    /// Sum of guaranteed shares, percent.
    pub compute_guaranteed: u32,
}

/// One failed constraint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Constraint {
    /// CUDA processes outside gpuslice (no slice, no interposer) hold the device: a whole-GPU
    /// tenant, which gpuslice never shares a GPU with (`docs/nvidia-toolkit.md`).
    Foreign {
        /// Their host pids and command names.
        processes: Vec<(u32, String)>,
    },
    /// `model` is not a substring of the device name.
    Model {
        /// The constraint.
        wanted: String,
        /// The device's name.
        name: String,
    },
    /// The memory commitment does not fit.
    Memory {
        /// The cap asked for on this device (`None` = best effort: the context reserve only).
        cap: Option<u64>,
        /// Cap plus context reserve (or the reserve alone).
        needed: u64,
        /// Memory not yet promised on the device.
        available: u64,
    },
    /// The slice would leave best-effort slices on the device an effective cap below the
    /// memory they hold now (their tenants would be over their cap, and the backstop kills
    /// what is over).
    BestEffortHeld {
        /// The effective cap each best-effort slice would be left, bytes.
        share: u64,
        /// The best-effort slices that hold more than that: (slice id, bytes held).
        held: Vec<(String, u64)>,
    },
    /// The guaranteed share does not fit.
    Compute {
        /// Share asked for.
        needed: u8,
        /// Share not yet guaranteed to others.
        available: u32,
    },
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Constraint::Foreign { processes } => {
                f.write_str("foreign-owned: CUDA process(es) outside gpuslice hold it (")?;
                for (i, (pid, comm)) in processes.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "pid {pid} {comm}")?;
                }
                f.write_str(
                    "), a whole-GPU tenant that gpuslice does not share a GPU with; \
                     gpuslice status names them",
                )
            }
            Constraint::Model { wanted, name } => {
                write!(f, "model \"{wanted}\" does not match \"{name}\"")
            }
            Constraint::Memory {
                cap: Some(cap),
                needed,
                available,
            } => write!(
                f,
                "memory: cap {} + context reserve {} = {} > {} uncommitted",
                format_bytes(*cap),
                format_bytes(needed.saturating_sub(*cap)),
                format_bytes(*needed),
                format_bytes(*available)
            ),
            Constraint::Memory {
                cap: None,
                needed,
                available,
            } => write!(
                f,
                "memory: a best-effort slice (no memory cap) needs its context reserve {} but \
                 only {} is uncommitted",
                format_bytes(*needed),
                format_bytes(*available)
            ),
            Constraint::BestEffortHeld { share, held } => {
                f.write_str("memory: it would leave best-effort slice(s) ")?;
                for (i, (id, bytes)) in held.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "\"{id}\" (holding {})", format_bytes(*bytes))?;
                }
                write!(
                    f,
                    " an effective cap of {} each, below what they hold (ask for less, or \
                     wait until they free memory)",
                    format_bytes(*share)
                )
            }
            Constraint::Compute { needed, available } => write!(
                f,
                "compute: guarantee {needed}% > {available}% not yet guaranteed"
            ),
        }
    }
}

/// Why one device cannot take the slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRefusal {
    /// NVML index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Every constraint that failed, in the order model, memory, compute.
    pub failed: Vec<Constraint>,
}

impl fmt::Display for DeviceRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {} ({}): ", self.index, self.uuid)?;
        for (i, c) in self.failed.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The node has no GPU.
    NoDevices,
    /// An explicitly listed device does not exist.
    UnknownDevice(DeviceRef),
    /// An explicitly listed device cannot take the slice.
    ListedDeviceFull(DeviceRefusal),
    /// Fewer devices fit than the count asked for.
    NotEnoughDevices {
        /// Devices asked for.
        wanted: usize,
        /// Devices that fit.
        fit: usize,
        /// Why each other device did not.
        devices: Vec<DeviceRefusal>,
    },
    /// An update does not fit on one of the slice's devices.
    UpdateDoesNotFit(DeviceRefusal),
    /// `[admission] dra_only`: the node's GPUs are allocated by Kubernetes DRA, and this admit
    /// is not the kubelet plugin's.
    DraOnly,
    /// `[admission] dra_only`: an update of the memory cap or the guarantee, which the
    /// scheduler accounted from the slice's ResourceClaim.
    DraAccounted,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoDevices => f.write_str("the node has no GPU"),
            Refusal::UnknownDevice(d) => write!(f, "device {d} does not exist on this node"),
            Refusal::ListedDeviceFull(r) => write!(f, "requested {r}"),
            Refusal::NotEnoughDevices {
                wanted,
                fit,
                devices,
            } => {
                write!(f, "needs {wanted} device(s), {fit} fit")?;
                for d in devices {
                    write!(f, "; {d}")?;
                }
                Ok(())
            }
            Refusal::UpdateDoesNotFit(r) => write!(f, "update does not fit on {r}"),
            Refusal::DraOnly => f.write_str(
                "this node's GPUs are allocated by Kubernetes DRA ([admission] dra_only = true): \
                 only gpuslice-kubelet-plugin admits slices here, for prepared ResourceClaims; \
                 ask through a ResourceClaim of DeviceClass gpuslice.io instead of gpuslice.io/* \
                 annotations, GPUSLICE_* environment or `gpuslice run` (docs/dra.md)",
            ),
            Refusal::DraAccounted => f.write_str(
                "its memory cap and guarantee are what Kubernetes DRA allocated to its \
                 ResourceClaim ([admission] dra_only = true): ask for a new claim instead; \
                 priority and the compute limit may still be changed (docs/dra.md)",
            ),
        }
    }
}

/// What a slice asks of one particular device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    /// Resolved memory cap on this device.
    pub cap: Option<u64>,
    /// Guaranteed share.
    pub compute: u8,
}

/// Checks `ask` against `device` carrying `load` (which must not include the slice itself).
/// `model` is checked case-insensitively as a substring of the device name.
pub fn check(
    policy: &Policy,
    device: &DeviceInfo,
    load: Load,
    ask: Ask,
    model: Option<&str>,
) -> Result<(), DeviceRefusal> {
    let mut failed = Vec::new();
    if let Some(m) = model {
        if !device
            .name
            .to_ascii_lowercase()
            .contains(&m.to_ascii_lowercase())
        {
            failed.push(Constraint::Model {
                wanted: m.to_string(),
                name: device.name.clone(),
            });
        }
    }
    if !policy.overcommit_memory {
        let needed = policy.commitment_on(device.index, ask.cap);
        let available = device.memory_total.saturating_sub(load.memory_committed);
        if needed > available {
            failed.push(Constraint::Memory {
                cap: ask.cap,
                needed,
                available,
            });
        }
    }
    let compute_free = 100u32.saturating_sub(load.compute_guaranteed);
    if u32::from(ask.compute) > compute_free {
        failed.push(Constraint::Compute {
            needed: ask.compute,
            available: compute_free,
        });
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(DeviceRefusal {
            index: device.index,
            uuid: device.uuid.clone(),
            failed,
        })
    }
}
