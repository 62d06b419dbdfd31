//! Configuration of the simulated node: the device list and knobs, parsed from `GPUSLICE_SIM_*`.

use std::path::PathBuf;

use crate::error::SimError;

/// Most devices one simulated node may have (fixed by the shared-state layout).
pub const MAX_DEVICES: usize = 16;

/// One simulated GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// Marketing name, as `cuDeviceGetName` / `nvmlDeviceGetName` report it.
    pub name: String,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub uuid: String,
    /// Capacity in bytes.
    pub total_mem: u64,
    /// Multiprocessor count.
    pub sm_count: u32,
    /// Compute capability, major.
    pub cc_major: u32,
    /// Compute capability, minor.
    pub cc_minor: u32,
    /// `00000000:18:00.0` (NVML's 8-digit domain form).
    pub pci_bus_id: String,
    /// Minor number of `/dev/nvidia<minor>`.
    pub minor: u32,
    /// Device memory one context costs on this device (`ctx=`); `None`: the node's
    /// [`SimConfig::ctx_overhead`].
    pub ctx_overhead: Option<u64>,
    /// Device memory a process's context grows by when it first launches a kernel of a module
    /// not yet loaded in it (`module=`); `None`: the node's [`SimConfig::module_overhead`].
    pub module_overhead: Option<u64>,
}

/// Whole-node configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// The devices, index order.
    pub devices: Vec<DeviceSpec>,
    /// The shared state file every process maps.
    pub state_path: PathBuf,
    /// Bytes a context costs on its device (unless the device says otherwise).
    pub ctx_overhead: u64,
    /// Bytes the lazy load of one module adds to a context at its first launch (unless the
    /// device says otherwise).
    pub module_overhead: u64,
    /// Allocation granularity (power of two) the simulated driver rounds to.
    pub alloc_granularity: u64,
    /// `cuDriverGetVersion` value, e.g. 12080.
    pub driver_version: i32,
    /// `nvmlSystemGetDriverVersion` string, e.g. `570.124.06`.
    pub nvml_driver_version: String,
    /// Engine time a switch between two processes' contexts costs.
    pub ctx_switch_ns: u64,
    /// How the engine shares a device between processes.
    pub engine: EngineMode,
    /// Length of one time slice in [`EngineMode::Timeslice`].
    pub timeslice_ns: u64,
    /// File every process appends the engine's timeline to (`GPUSLICE_SIM_TRACE`; not part
    /// of the state's fingerprint: traced and untraced processes share a node).
    pub trace: Option<PathBuf>,
}

/// How a device's engine arbitrates between processes (`GPUSLICE_SIM_ENGINE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineMode {
    /// Non-preemptive: one whole kernel at a time, round robin between processes at kernel
    /// boundaries.
    Kernel,
    /// Preemptive time slices between the contexts that have work, as NVIDIA GPUs since Pascal
    /// do without MPS; a context alone is never interrupted. The default.
    Timeslice,
}

impl EngineMode {
    /// The value `GPUSLICE_SIM_ENGINE` takes for this mode.
    pub fn name(self) -> &'static str {
        match self {
            EngineMode::Kernel => "kernel",
            EngineMode::Timeslice => "timeslice",
        }
    }
}

/// Default per-context cost: what a bare driver-API context (cuInit, primary context) holds
/// beyond its allocations on an NVIDIA H200 with driver 580.159.04, as NVML lists it (518 MiB,
/// lazy and eager module loading alike; `docs/benchmarks.md` § "Context footprint").
pub const DEFAULT_CTX_OVERHEAD: u64 = 518 * MI;
/// Default growth of a context when a module is first launched in it (lazy loading): on the
/// same machine PyTorch's context grew by 120, 90, 8 and 34 MiB as its first matmul, softmax +
/// layer norm, convolution and sort ran (a mean of 63 MiB per kernel family).
pub const DEFAULT_MODULE_OVERHEAD: u64 = 64 * MI;

/// Default time slice: 2 ms.
pub const DEFAULT_TIMESLICE_NS: u64 = 2_000_000;

const MI: u64 = 1 << 20;
/// Default device name.
pub const DEFAULT_NAME: &str = "NVIDIA H100 80GB HBM3";
/// Default device memory: 81559 MiB, as an H100 80GB HBM3 reports it.
pub const DEFAULT_MEM: u64 = 81559 * MI;
const DEFAULT_SMS: u32 = 132;
const DEFAULT_CC: (u32, u32) = (9, 0);

/// PCI bus numbers of a typical 8-GPU HGX board, then a plain sequence.
const BUSES: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];

impl DeviceSpec {
    /// The default device (one H100 80GB) at `index`, with derived UUID and PCI id.
    pub fn default_at(index: u32) -> DeviceSpec {
        DeviceSpec {
            name: DEFAULT_NAME.to_string(),
            uuid: derived_uuid(index),
            total_mem: DEFAULT_MEM,
            sm_count: DEFAULT_SMS,
            cc_major: DEFAULT_CC.0,
            cc_minor: DEFAULT_CC.1,
            pci_bus_id: derived_pci(index),
            minor: index,
            ctx_overhead: None,
            module_overhead: None,
        }
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Deterministic UUID of device `index` (stable across runs and processes).
pub fn derived_uuid(index: u32) -> String {
    let a = splitmix(0x6770_7573_6c69_6365 ^ u64::from(index));
    let b = splitmix(a);
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        a as u16,
        (b >> 48) as u16,
        b & 0xffff_ffff_ffff
    )
}

/// Deterministic PCI bus id of device `index`.
pub fn derived_pci(index: u32) -> String {
    let bus = BUSES.get(index as usize).copied().unwrap_or(0xe0 + index);
    format!("00000000:{:02X}:00.0", bus & 0xff)
}

/// Parses a byte quantity: plain bytes, or a number with `Ki`, `Mi`, `Gi`, `Ti` (binary) or
/// `K`, `M`, `G`, `T` (decimal) suffix. `None` on anything else or overflow.
pub fn parse_quantity(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = [
        ("Ki", 1u64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("K", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ]
    .iter()
    .find_map(|(suf, m)| s.strip_suffix(suf).map(|n| (n, *m)))
    .unwrap_or((s, 1));
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>().ok()?.checked_mul(mult)
}

fn bad(var: &str, value: &str, why: &str) -> SimError {
    SimError::Config(format!("{var}={value:?}: {why}"))
}

fn valid_uuid(u: &str) -> bool {
    let Some(rest) = u.strip_prefix("GPU-") else {
        return false;
    };
    let parts: Vec<&str> = rest.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Parses the `GPUSLICE_SIM_DEVICES` syntax (see tests/sim/README.md).
pub fn parse_devices(value: &str) -> Result<Vec<DeviceSpec>, SimError> {
    const VAR: &str = "GPUSLICE_SIM_DEVICES";
    let mut out = Vec::new();
    for (i, dev) in value.split(';').enumerate() {
        let dev = dev.trim();
        if dev.is_empty() {
            if i == 0 || !value.trim_end().ends_with(';') {
                return Err(bad(VAR, value, &format!("device {i} is empty")));
            }
            continue;
        }
        let index = out.len() as u32;
        let mut spec = DeviceSpec::default_at(index);
        for kv in dev.split(',') {
            let Some((k, v)) = kv.split_once('=') else {
                return Err(bad(VAR, value, &format!("`{kv}` is not key=value")));
            };
            let (k, v) = (k.trim(), v.trim());
            match k {
                "name" if !v.is_empty() => spec.name = v.to_string(),
                "mem" => {
                    spec.total_mem = parse_quantity(v).filter(|&m| m > 0).ok_or_else(|| {
                        bad(VAR, value, &format!("mem `{v}` is not a quantity > 0"))
                    })?
                }
                "sms" => {
                    spec.sm_count = v
                        .parse()
                        .ok()
                        .filter(|&n: &u32| n > 0 && n <= 1024)
                        .ok_or_else(|| bad(VAR, value, &format!("sms `{v}` is not 1..=1024")))?
                }
                "cc" => {
                    let parsed = v
                        .split_once('.')
                        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                        .filter(|&(a, b): &(u32, u32)| (1..=20).contains(&a) && b < 10);
                    let (a, b) = parsed
                        .ok_or_else(|| bad(VAR, value, &format!("cc `{v}` is not MAJOR.MINOR")))?;
                    spec.cc_major = a;
                    spec.cc_minor = b;
                }
                "uuid" if valid_uuid(v) => spec.uuid = v.to_string(),
                "pci" if !v.is_empty() && v.len() < 32 => spec.pci_bus_id = v.to_string(),
                "ctx" | "module" => {
                    let q = parse_quantity(v)
                        .ok_or_else(|| bad(VAR, value, &format!("{k} `{v}` is not a quantity")))?;
                    if k == "ctx" {
                        spec.ctx_overhead = Some(q);
                    } else {
                        spec.module_overhead = Some(q);
                    }
                }
                "minor" => {
                    spec.minor = v
                        .parse()
                        .map_err(|_| bad(VAR, value, &format!("minor `{v}` is not a number")))?
                }
                _ => return Err(bad(VAR, value, &format!("bad key or value `{kv}`"))),
            }
        }
        out.push(spec);
    }
    if out.is_empty() {
        return Err(bad(VAR, value, "no device"));
    }
    if out.len() > MAX_DEVICES {
        return Err(bad(VAR, value, &format!("more than {MAX_DEVICES} devices")));
    }
    Ok(out)
}

fn default_state_path() -> PathBuf {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("gpuslice-sim-{uid}.state"))
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            devices: vec![DeviceSpec::default_at(0)],
            state_path: default_state_path(),
            ctx_overhead: DEFAULT_CTX_OVERHEAD,
            module_overhead: DEFAULT_MODULE_OVERHEAD,
            alloc_granularity: 2 * MI,
            driver_version: 12080,
            nvml_driver_version: "570.124.06".to_string(),
            ctx_switch_ns: 25_000,
            engine: EngineMode::Timeslice,
            timeslice_ns: DEFAULT_TIMESLICE_NS,
            trace: None,
        }
    }
}

impl SimConfig {
    /// Reads the `GPUSLICE_SIM_*` environment variables over the defaults.
    pub fn from_env() -> Result<SimConfig, SimError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`SimConfig::from_env`] with an arbitrary variable source (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<SimConfig, SimError> {
        let mut c = SimConfig::default();
        if let Some(v) = get("GPUSLICE_SIM_DEVICES") {
            c.devices = parse_devices(&v)?;
        }
        if let Some(v) = get("GPUSLICE_SIM_STATE") {
            if v.is_empty() {
                return Err(bad("GPUSLICE_SIM_STATE", &v, "empty path"));
            }
            c.state_path = PathBuf::from(v);
        }
        if let Some(v) = get("GPUSLICE_SIM_CTX_OVERHEAD") {
            c.ctx_overhead = parse_quantity(&v)
                .ok_or_else(|| bad("GPUSLICE_SIM_CTX_OVERHEAD", &v, "not a quantity"))?;
        }
        if let Some(v) = get("GPUSLICE_SIM_MODULE_OVERHEAD") {
            c.module_overhead = parse_quantity(&v)
                .ok_or_else(|| bad("GPUSLICE_SIM_MODULE_OVERHEAD", &v, "not a quantity"))?;
        }
        if let Some(v) = get("GPUSLICE_SIM_ALLOC_GRANULARITY") {
            c.alloc_granularity = parse_quantity(&v)
                .filter(|g| g.is_power_of_two())
                .ok_or_else(|| {
                    bad(
                        "GPUSLICE_SIM_ALLOC_GRANULARITY",
                        &v,
                        "not a power-of-two quantity",
                    )
                })?;
        }
        if let Some(v) = get("GPUSLICE_SIM_DRIVER_VERSION") {
            c.driver_version = v
                .trim()
                .parse()
                .ok()
                .filter(|&d: &i32| d >= 1000)
                .ok_or_else(|| {
                    bad(
                        "GPUSLICE_SIM_DRIVER_VERSION",
                        &v,
                        "not a version like 12080",
                    )
                })?;
        }
        if let Some(v) = get("GPUSLICE_SIM_NVML_DRIVER_VERSION") {
            let ok =
                !v.is_empty() && v.len() < 80 && v.bytes().all(|b| b.is_ascii_digit() || b == b'.');
            if !ok {
                return Err(bad(
                    "GPUSLICE_SIM_NVML_DRIVER_VERSION",
                    &v,
                    "not a version like 570.124.06",
                ));
            }
            c.nvml_driver_version = v;
        }
        if let Some(v) = get("GPUSLICE_SIM_CTX_SWITCH_US") {
            c.ctx_switch_ns = v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|&us| us <= 1_000_000)
                .map(|us| us * 1000)
                .ok_or_else(|| {
                    bad(
                        "GPUSLICE_SIM_CTX_SWITCH_US",
                        &v,
                        "not microseconds 0..=1000000",
                    )
                })?;
        }
        if let Some(v) = get("GPUSLICE_SIM_TRACE") {
            if v.is_empty() {
                return Err(bad("GPUSLICE_SIM_TRACE", &v, "empty path"));
            }
            c.trace = Some(PathBuf::from(v));
        }
        if let Some(v) = get("GPUSLICE_SIM_ENGINE") {
            c.engine = match v.trim() {
                "kernel" => EngineMode::Kernel,
                "timeslice" => EngineMode::Timeslice,
                _ => {
                    return Err(bad(
                        "GPUSLICE_SIM_ENGINE",
                        &v,
                        "not `timeslice` or `kernel`",
                    ))
                }
            };
        }
        if let Some(v) = get("GPUSLICE_SIM_TIMESLICE_US") {
            c.timeslice_ns = v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|us| (1..=1_000_000).contains(us))
                .map(|us| us * 1000)
                .ok_or_else(|| {
                    bad(
                        "GPUSLICE_SIM_TIMESLICE_US",
                        &v,
                        "not microseconds 1..=1000000",
                    )
                })?;
        }
        c.validate()?;
        Ok(c)
    }

    /// Checks invariants the shared layout relies on.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.devices.is_empty() || self.devices.len() > MAX_DEVICES {
            return Err(SimError::Config(format!(
                "{} devices: must be 1..={MAX_DEVICES}",
                self.devices.len()
            )));
        }
        if !self.alloc_granularity.is_power_of_two() {
            return Err(SimError::Config(format!(
                "allocation granularity {} is not a power of two",
                self.alloc_granularity
            )));
        }
        Ok(())
    }

    /// Bytes one context costs on device index `d` (the device's own figure, else the node's).
    pub fn ctx_overhead_of(&self, d: usize) -> u64 {
        self.devices
            .get(d)
            .and_then(|s| s.ctx_overhead)
            .unwrap_or(self.ctx_overhead)
    }

    /// Bytes one module's lazy load adds to a context on device index `d`.
    pub fn module_overhead_of(&self, d: usize) -> u64 {
        self.devices
            .get(d)
            .and_then(|s| s.module_overhead)
            .unwrap_or(self.module_overhead)
    }

    /// FNV-1a fingerprint of everything that must agree between processes sharing a state file.
    pub fn fingerprint(&self) -> u64 {
        let mut s = format!(
            "{}|{}|{}|{}|{}|{}|{}|{}|",
            self.ctx_overhead,
            self.module_overhead,
            self.alloc_granularity,
            self.driver_version,
            self.nvml_driver_version,
            self.ctx_switch_ns,
            self.engine.name(),
            self.timeslice_ns
        );
        for d in &self.devices {
            s.push_str(&format!(
                "{}|{}|{}|{}|{}.{}|{}|{}|{:?}|{:?};",
                d.name,
                d.uuid,
                d.total_mem,
                d.sm_count,
                d.cc_major,
                d.cc_minor,
                d.pci_bus_id,
                d.minor,
                d.ctx_overhead,
                d.module_overhead
            ));
        }
        s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }
}
