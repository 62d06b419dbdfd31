//! The arbiter control protocol: JSON, one request per line and one response per line over the
//! root-only unix socket `<state-dir>/arbiter.sock`. Every message carries `"version"`
//! ([`PROTOCOL_VERSION`]); the operation is in `"op"` (requests) or `"result"` (responses).
//! Examples of every message: `docs/protocol.md`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::quantity::MemoryRequest;
use crate::request::{Priority, SliceRequest};

/// The protocol version this crate speaks. A peer with another version gets
/// [`ErrorCode::Version`].
pub const PROTOCOL_VERSION: u32 = 1;

/// The socket's file name inside the state directory.
pub const SOCKET_NAME: &str = "arbiter.sock";

/// Longest request line the arbiter reads (bytes, newline included).
pub const MAX_LINE: usize = 64 * 1024;

/// Who a slice belongs to. All optional: a bare process (`gpuslice run`) has only a pid.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Owner {
    /// OCI container id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// Host pid of the container's init or of the bare process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// cgroup path of the container, used to find its processes and notice it is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The Kubernetes Pod and container (from the CRI runtime's OCI annotations), for the
    /// metrics' `namespace`, `pod` and `container` labels; `None` outside Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<crate::pod::PodRef>,
}

/// A request to the arbiter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Admit and place a slice. Admitting an existing id with the same request returns the
    /// existing assignment (idempotent); with a different request it is a `conflict`.
    Admit {
        /// Caller-chosen id: `[A-Za-z0-9_.-]{1,128}`, not starting with `.` nor ending in
        /// `.sock`; names the slice directory.
        slice_id: String,
        /// What the slice asks for.
        request: SliceRequest,
        /// Who owns it.
        #[serde(default)]
        owner: Owner,
    },
    /// Release a slice: its memory and shares return to the pool, its directory is removed.
    Release {
        /// The slice.
        slice_id: String,
    },
    /// Change a running slice. Omitted fields are unchanged; `compute: 0` makes it best effort.
    Update {
        /// The slice.
        slice_id: String,
        /// New memory cap per device.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory: Option<MemoryRequest>,
        /// New guarantee (0 = best effort).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        compute: Option<u8>,
        /// New ceiling.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        compute_limit: Option<u8>,
        /// New priority.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        priority: Option<Priority>,
    },
    /// Bind a slice to the processes that now run it: the container's init (host pid) and its
    /// cgroup, known only once the container exists (sent by `gpuslice-hook create-runtime`).
    /// Omitted fields are unchanged. Binding again replaces the previous binding.
    Bind {
        /// The slice.
        slice_id: String,
        /// Host pid of the container's init process.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        /// The container's cgroup path (relative to the cgroup root).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cgroup: Option<String>,
        /// The container's Kubernetes Pod (from its OCI annotations): a slice admitted before
        /// its container existed (DRA, device plugin) learns it here, for its metric labels.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pod: Option<crate::pod::PodRef>,
    },
    /// The node's devices and slices. A struct variant with no fields, so that
    /// `deny_unknown_fields` refuses `{"op":"status","x":1}` (a unit variant would ignore it).
    Status {},
}

/// A request line: the version and the request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestEnvelope {
    /// Must equal [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The request itself (its fields are flattened into the same object).
    #[serde(flatten)]
    pub request: Request,
}

impl RequestEnvelope {
    /// Wraps a request with this crate's version.
    pub fn new(request: Request) -> Self {
        RequestEnvelope {
            version: PROTOCOL_VERSION,
            request,
        }
    }
}

/// One device of a slice's assignment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssignedDevice {
    /// NVML index on the node.
    pub index: u32,
    /// NVML UUID (`GPU-…`).
    pub uuid: String,
    /// Device name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// The device's total memory, bytes.
    pub memory_total: u64,
    /// The slice's cap on this device, bytes (a percentage request is resolved here);
    /// `None` = no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_cap: Option<u64>,
    /// For a slice without a cap (best-effort memory): its share of the memory no capped slice
    /// was promised on this device, bytes, as written into its region limits (what its
    /// interposer enforces and `cuMemGetInfo` reports). Recomputed by the arbiter whenever a
    /// slice on the device comes, goes or changes: a figure, not a promise. `None` for a capped
    /// slice, with `overcommit_memory` (best-effort slices are then unbounded), and from
    /// arbiters that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_best_effort: Option<u64>,
}

/// A slice as the arbiter holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceStatus {
    /// The slice id.
    pub slice_id: String,
    /// The request as admitted (with updates applied).
    pub request: SliceRequest,
    /// Its owner.
    pub owner: Owner,
    /// Where it was placed.
    pub devices: Vec<AssignedDevice>,
}

/// One device's bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStatus {
    /// NVML index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Name.
    pub name: String,
    /// Total memory, bytes.
    pub memory_total: u64,
    /// Memory promised to slices on this device: caps plus per-process context reserves
    /// (a slice without a cap counts its context reserve only).
    pub memory_committed: u64,
    /// Sum of guaranteed shares, percent (≤ 100).
    pub compute_guaranteed: u32,
    /// Ids of the slices placed here.
    pub slices: Vec<String>,
    /// What the time-slice scheduler measured per slice on this device (empty when the arbiter
    /// runs without a scheduler).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<ShareStatus>,
    /// The CUDA context footprint of this device and what each process is charged for its
    /// context (`docs/contexts.md`); absent from arbiters that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextStatus>,
}

/// A device's CUDA context footprint as the arbiter found it, and the per-process charge.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextStatus {
    /// Bytes a bare CUDA context holds on the device outside any allocation (NVML's figure for
    /// the arbiter's probe context).
    pub footprint: u64,
    /// `measured` (a probe context at start), `saved` (an earlier measurement with the same
    /// driver and device) or `assumed` (not measurable: the H200 figure, 518 MiB).
    pub source: String,
    /// The NVIDIA driver version it belongs to.
    pub driver: String,
    /// What each process is charged on the device for its context and lazily loaded modules:
    /// the larger of `admission.context_reserve` and this device's own footprint plus
    /// `admission.module_allowance`.
    pub charge: u64,
    /// Why the footprint is not a measurement (`source: assumed`): the probe's error, such as
    /// NVML not listing the probe process because the arbiter is not in the host's pid
    /// namespace. The charge then carries a margin (`docs/contexts.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Achieved compute share of one slice on one device, as the scheduler charged it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareStatus {
    /// The slice id.
    pub slice_id: String,
    /// Device time charged over the last second / wall time, basis points (10000 = 100 %).
    pub achieved_1s_bp: u32,
    /// The same over the last 10 s.
    pub achieved_10s_bp: u32,
    /// Times the slice was granted the lease.
    pub grants: u64,
    /// Total ns its threads waited at the gate without the lease.
    pub wait_ns: u64,
    /// It holds the lease now.
    pub holding: bool,
    /// Consecutive leases in which the slice claimed demand at the gate but launched nothing
    /// (a hostile or broken gate; `docs/scheduling.md`), 0 once it launches again. Absent from
    /// arbiters that predate it (read as 0).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub strikes: u32,
    /// Leases the slice lost that way, ever.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub strikes_total: u64,
    /// Its demand claims are ignored now (back-off after a strike).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backed_off: bool,
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

/// One action of the arbiter's backstop (`docs/threat-model.md`): a slice caught holding more
/// device memory than its cap, or running kernels without the lease, and what was done.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackstopEvent {
    /// The slice.
    pub slice_id: String,
    /// NVML index of the device.
    pub device: u32,
    /// `memory` (over its cap) or `lease` (kernels without the lease).
    pub kind: String,
    /// `kill`, `freeze` or `log` (what was configured), or `failed` when it could not be done.
    pub action: String,
    /// Host pids acted on (or, for `log`, the offenders).
    pub pids: Vec<u32>,
    /// One line for people: `killed pid 4121 (memory 1.3 GiB > cap 1 GiB + reserve 512 MiB)`.
    pub message: String,
    /// When, milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// The reply to `status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// Every device on the node.
    pub devices: Vec<DeviceStatus>,
    /// Every admitted slice.
    pub slices: Vec<SliceStatus>,
    /// Recent backstop actions (a few per slice, newest last); empty when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backstop: Vec<BackstopEvent>,
    /// Each slice process's own footprint as the backstop saw it last (empty without a
    /// backstop, or from arbiters that predate it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessFootprint>,
    /// CUDA processes outside gpuslice (in no slice, without the interposer) on a device, as
    /// the backstop saw them at its last check: such a device is foreign-owned and takes no
    /// new slice (`docs/nvidia-toolkit.md`, "One GPU, one owner"). Empty when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<ForeignProcess>,
}

/// A CUDA process on a device that belongs to no slice and runs without the interposer: a
/// whole-GPU tenant (NVIDIA's device plugin, a process started by hand). It marks its device
/// foreign-owned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignProcess {
    /// NVML index of the device.
    pub device: u32,
    /// Host pid.
    pub pid: u32,
    /// Its command name (`/proc/<pid>/comm`; empty when unreadable).
    #[serde(default)]
    pub comm: String,
    /// Bytes NVML lists for it on the device (`None`: NVML cannot say).
    #[serde(default)]
    pub used: Option<u64>,
}

/// One process of a slice on one device, as the backstop last saw it: what NVML lists for it
/// against what the interposer counted for its allocations. The difference is the process's
/// own context and module footprint, learned per process (`docs/contexts.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessFootprint {
    /// The slice.
    pub slice_id: String,
    /// NVML index of the device.
    pub device: u32,
    /// Host pid.
    pub pid: u32,
    /// Bytes NVML lists for the process on the device.
    pub used: u64,
    /// Bytes of allocations the interposer counted for it there (its record in the slice's
    /// `usage` less its context charge; 0 when it has no record). `None`: the usage file could
    /// not be read.
    pub counted: Option<u64>,
    /// `used − counted`: its context and lazily loaded modules (plus, for a process that
    /// bypasses the interposer, what it hid). `None` with `counted`.
    pub footprint: Option<u64>,
}

/// What kind of error a request met.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The line is not a valid request, or a value is out of range.
    BadRequest,
    /// The protocol version differs.
    Version,
    /// The request is valid but does not fit (admission or update refused).
    Refused,
    /// No slice with that id.
    NotFound,
    /// The slice id exists with a different request.
    Conflict,
    /// The arbiter failed (I/O, NVML).
    Internal,
    /// The arbiter has as many connections being served and waiting as it takes; the request
    /// was not read. Retrying shortly is safe.
    Busy,
}

/// A reply from the arbiter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    /// The slice is admitted (or already was, with the same request).
    Admitted {
        /// The slice id.
        slice_id: String,
        /// Its directory on the host, to be mounted at `/run/gpuslice` in the container.
        slice_dir: PathBuf,
        /// Where it was placed, in the order the tenant sees the devices.
        devices: Vec<AssignedDevice>,
        /// True when this admit repeated an earlier one.
        #[serde(default)]
        existing: bool,
    },
    /// The slice is gone.
    Released {
        /// The slice id.
        slice_id: String,
    },
    /// The slice is bound to its processes.
    Bound {
        /// The slice id.
        slice_id: String,
    },
    /// The update is applied.
    Updated {
        /// The slice id.
        slice_id: String,
        /// The assignment after the update.
        devices: Vec<AssignedDevice>,
        /// Things the caller should tell the user (e.g. a cap below current use).
        #[serde(default)]
        warnings: Vec<String>,
    },
    /// The node's state.
    Status(NodeStatus),
    /// The request failed.
    Error {
        /// Kind of failure.
        code: ErrorCode,
        /// A sentence for people, naming the constraint and the numbers.
        message: String,
    },
}

/// A response line: the version and the response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseEnvelope {
    /// The arbiter's [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The response (flattened).
    #[serde(flatten)]
    pub response: Response,
}

impl ResponseEnvelope {
    /// Wraps a response with this crate's version.
    pub fn new(response: Response) -> Self {
        ResponseEnvelope {
            version: PROTOCOL_VERSION,
            response,
        }
    }
}

/// Slice ids of the DRA kubelet plugin: `dra-<claim uid>`.
pub const DRA_SLICE_PREFIX: &str = "dra-";

/// Whether an admit is the DRA kubelet plugin's: id `dra-<claim uid>` (a UUID, as the API
/// server assigns them) and no owner (the slice belongs to the claim, not to a container or a
/// process). What `[admission] dra_only` lets through.
pub fn is_dra_slice(id: &str, owner: &Owner) -> bool {
    let Some(uid) = id.strip_prefix(DRA_SLICE_PREFIX) else {
        return false;
    };
    let groups: Vec<&str> = uid.split('-').collect();
    let uuid = groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
    uuid && *owner == Owner::default()
}

/// Whether `id` is acceptable as a slice id (it names a directory under the state dir, beside
/// the arbiter's socket, so names ending in `.sock` are reserved).
pub fn valid_slice_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && !id.starts_with('.')
        && !id.ends_with(".sock")
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}
