//! The node configuration file (`/etc/gpuslice/config.toml`, `--config`, `GPUSLICE_CONFIG`):
//! schema, defaults and loading. Unknown keys are errors that name the key, so a misspelt
//! setting never silently falls back to its default. Reference: `docs/configuration` section of
//! `docs/protocol.md`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use crate::quantity::ByteSize;

/// Default configuration path.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/gpuslice/config.toml";
/// Default state directory.
pub const DEFAULT_STATE_DIR: &str = gpuslice_region::layout::HOST_STATE_DIR;
/// Default metrics listen address. 9400 is NVIDIA's DCGM exporter, 9100 node-exporter,
/// 9464 the OpenTelemetry Prometheus exporter; gpuslice uses 9447 on loopback.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9447";
/// Default per-process context reserve: what a CUDA context costs on the device outside any
/// allocation the interposer sees. A floor: the arbiter raises the charge to what it measures
/// (`docs/contexts.md`).
pub const DEFAULT_CONTEXT_RESERVE: u64 = 512 << 20;
/// What a bare CUDA context was measured to hold on an NVIDIA H200 (driver 580.159.04, NVML's
/// per-process figure): the footprint assumed for a device the arbiter could not measure.
pub const FALLBACK_CONTEXT_FOOTPRINT: u64 = 518 << 20;
/// Default `admission.module_allowance`: what lazily loaded modules may add to a process after
/// its context exists. Measured: PyTorch grew by 164 MiB of modules over five kernel families
/// (matmul, softmax, layer norm, convolution, sort) on the H200; 256 MiB leaves half again.
pub const DEFAULT_MODULE_ALLOWANCE: u64 = 256 << 20;
/// Default scheduling quantum.
pub const DEFAULT_QUANTUM: Duration = Duration::from_millis(5);
/// Largest accepted `scheduler.high_linger`.
pub const MAX_HIGH_LINGER: Duration = Duration::from_millis(5);
/// Smallest and largest accepted quantum.
pub const QUANTUM_RANGE: (Duration, Duration) =
    (Duration::from_micros(500), Duration::from_secs(1));

/// How slices are placed across devices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// The fullest device that fits: keeps large holes free for large requests.
    #[default]
    Binpack,
    /// The emptiest device that fits: spreads load.
    Spread,
}

/// What the runtime pieces do when the arbiter cannot be reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailMode {
    /// Refuse to create a container that asks for a slice (no unchecked sharing).
    #[default]
    Closed,
    /// Start it with the memory cap enforced locally by the interposer, without compute shares.
    Open,
}

/// `[admission]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdmissionConfig {
    /// Placement policy.
    pub placement: Placement,
    /// Allow the sum of memory caps on a device to exceed its memory.
    pub overcommit_memory: bool,
    /// Memory reserved per process on each of its devices for the CUDA context: a floor; the
    /// charge is the larger of this and the measured context footprint plus `module_allowance`.
    pub context_reserve: ByteSize,
    /// What lazily loaded modules may add to a process beyond its measured context, counted in
    /// the per-process context charge (`docs/contexts.md`).
    pub module_allowance: ByteSize,
    /// How many processes per slice admission reserves context memory for.
    pub processes_per_slice: u32,
    /// The node's GPU capacity is allocated by Kubernetes DRA (`gpuslice-kubelet-plugin`
    /// publishes it; `docs/dra.md`): only the plugin's slices are admitted ([`is_dra_slice`]
    /// with no owner); every other admit (annotations, environment, `gpuslice run`) is refused,
    /// so the scheduler's sums stay the arbiter's. Slices restored at start are kept.
    ///
    /// [`is_dra_slice`]: crate::protocol::is_dra_slice
    pub dra_only: bool,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            placement: Placement::Binpack,
            overcommit_memory: false,
            context_reserve: ByteSize(DEFAULT_CONTEXT_RESERVE),
            module_allowance: ByteSize(DEFAULT_MODULE_ALLOWANCE),
            processes_per_slice: 1,
            dra_only: false,
        }
    }
}

/// Highest accepted `scheduler.realtime_priority` (Linux `SCHED_FIFO` priorities are 1–99).
pub const MAX_REALTIME_PRIORITY: u32 = 99;

/// `[scheduler]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Lease length (`"5ms"`, `"2500us"`).
    #[serde(serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub quantum: Duration,
    /// Run each device's scheduler thread under `SCHED_FIFO` at this priority (1–99); 0 = off
    /// (the default; `docs/scheduling.md`). Needs `CAP_SYS_NICE` (kept only when this is set).
    pub realtime_priority: u32,
    /// How long an idle `priority: high` holder keeps the lease while others wait (0, the
    /// default: handed on at once like any idle holder; at most 5ms; `docs/scheduling.md`).
    #[serde(serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub high_linger: Duration,
    /// Whether a `priority: high` slice past its share gets a lease every so often while the
    /// slices it owes catch up, instead of waiting until they have (false, the default;
    /// `docs/scheduling.md`).
    pub high_repay_turns: bool,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            quantum: DEFAULT_QUANTUM,
            realtime_priority: 0,
            high_linger: Duration::ZERO,
            high_repay_turns: false,
        }
    }
}

/// `[metrics]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Serve Prometheus metrics at all.
    pub enabled: bool,
    /// Listen address; must be a loopback address unless `allow_remote`.
    pub listen: SocketAddr,
    /// Permit a non-loopback listen address.
    pub allow_remote: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            listen: DEFAULT_METRICS_ADDR
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 9447))),
            allow_remote: false,
        }
    }
}

/// What the backstop does to a slice it caught (`[backstop]`, `docs/threat-model.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackstopAction {
    /// SIGKILL the offending processes.
    Kill,
    /// Freeze the slice's cgroup (cgroup v1 freezer or v2 `cgroup.freeze`); a slice without a
    /// cgroup (a bare process) has its offending processes stopped with SIGSTOP instead.
    Freeze,
    /// Only log and count.
    Log,
}

impl BackstopAction {
    /// The config / metrics spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BackstopAction::Kill => "kill",
            BackstopAction::Freeze => "freeze",
            BackstopAction::Log => "log",
        }
    }
}

/// Longest accepted backstop period: four checks per second keep containment within 1 s.
pub const BACKSTOP_MAX_PERIOD: Duration = Duration::from_millis(250);
/// Shortest accepted backstop period.
pub const BACKSTOP_MIN_PERIOD: Duration = Duration::from_millis(10);

/// `[backstop]`: the arbiter's check, independent of the interposer, of what NVML reports per
/// process against each slice's memory cap and lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackstopConfig {
    /// Run the check at all.
    pub enabled: bool,
    /// How often NVML is compared with the slices (10ms–250ms).
    #[serde(serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub period: Duration,
    /// A slice whose processes hold more device memory than its cap plus one context reserve
    /// per process.
    pub memory_action: BackstopAction,
    /// A slice whose processes ran kernels while it did not hold the lease.
    pub lease_action: BackstopAction,
    /// Device memory allowed per process beyond the slice's cap: the CUDA context, which the
    /// interposer never sees as an allocation (hundreds of MiB on current GPUs).
    pub context_allowance: ByteSize,
    /// Device time per second a slice may run beyond what the scheduler charged it before it
    /// counts as running without the lease (absorbs sampling and charging lag; 0–1s).
    #[serde(serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub lease_tolerance: Duration,
}

impl Default for BackstopConfig {
    fn default() -> Self {
        BackstopConfig {
            enabled: true,
            period: BACKSTOP_MAX_PERIOD,
            memory_action: BackstopAction::Kill,
            lease_action: BackstopAction::Log,
            context_allowance: ByteSize(DEFAULT_CONTEXT_RESERVE),
            lease_tolerance: Duration::from_millis(250),
        }
    }
}

/// `[runtime]`: what `gpuslice-runtime` and `gpuslice-hook` do around the low-level runtime
/// (`docs/runtime.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// The low-level runtime `gpuslice-runtime` execs: a name searched in `PATH` (`runc`, `crun`,
    /// `nvidia-container-runtime`) or a path.
    pub low_level: PathBuf,
    /// Add the assigned GPUs' device nodes (`/dev/nvidiaN`, `nvidiactl`, `nvidia-uvm`) to the
    /// container. Off when another component (NVIDIA toolkit, CDI) injects devices.
    pub inject_devices: bool,
    /// `gpuslice-hook`; `None` = `gpuslice-hook` next to the running executable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            low_level: PathBuf::from("runc"),
            inject_devices: false,
            hook: None,
        }
    }
}

/// Default `kubernetes.device_plugin_unit`: one unit of `gpuslice.io/gpu-memory` is 1 GiB.
pub const DEFAULT_DEVICE_PLUGIN_UNIT: u64 = 1 << 30;

/// `[kubernetes]`: what `gpuslice-kubelet-plugin` offers the cluster (`docs/device-plugin.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesConfig {
    /// One unit of the device plugin's extended resource `gpuslice.io/gpu-memory`: a whole
    /// number of MiB (`"1Gi"`, `"256Mi"`). The plugin's `--unit` overrides it.
    pub device_plugin_unit: ByteSize,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            device_plugin_unit: ByteSize(DEFAULT_DEVICE_PLUGIN_UNIT),
        }
    }
}

/// The whole configuration file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// State directory (slice directories, `arbiter.sock`).
    pub state_dir: PathBuf,
    /// The interposer; `None` = `../lib/gpuslice/libgpuslice.so` next to the executable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interposer: Option<PathBuf>,
    /// The NVML library to load; `None` = the system's `libnvidia-ml.so.1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml_library: Option<PathBuf>,
    /// Behaviour when the arbiter is unreachable.
    pub fail: FailMode,
    /// Admission and placement.
    pub admission: AdmissionConfig,
    /// Time-slicing.
    pub scheduler: SchedulerConfig,
    /// Prometheus endpoint.
    pub metrics: MetricsConfig,
    /// The runtime wrapper and hook.
    pub runtime: RuntimeConfig,
    /// The cooperation-free backstop (`docs/threat-model.md`).
    pub backstop: BackstopConfig,
    /// The kubelet plugin.
    pub kubernetes: KubernetesConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            interposer: None,
            nvml_library: None,
            fail: FailMode::Closed,
            admission: AdmissionConfig::default(),
            scheduler: SchedulerConfig::default(),
            metrics: MetricsConfig::default(),
            runtime: RuntimeConfig::default(),
            backstop: BackstopConfig::default(),
            kubernetes: KubernetesConfig::default(),
        }
    }
}

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named explicitly does not exist or cannot be read.
    #[error("cannot read config {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Syntax error, wrong type, unknown key.
    #[error("config {path}: {message}")]
    Parse {
        /// The file (or `<string>`).
        path: PathBuf,
        /// toml's message, which names the key and the line.
        message: String,
    },
    /// A value is well-formed but not acceptable.
    #[error("config {path}: {key} = {value}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Dotted key.
        key: &'static str,
        /// The value.
        value: String,
        /// Why.
        reason: String,
    },
}

impl Config {
    /// Parses TOML text; `origin` names it in errors.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        cfg.check(origin)?;
        Ok(cfg)
    }

    /// Loads `path`. When `explicit` is false (the default path was used) a missing file means
    /// defaults; when true (`--config` / `GPUSLICE_CONFIG`) it is an error.
    pub fn load(path: &Path, explicit: bool) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::from_toml_str(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                Ok(Config::default())
            }
            Err(source) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Renders the configuration as TOML (every key, defaults included).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    fn check(&self, origin: &Path) -> Result<(), ConfigError> {
        let invalid = |key, value: String, reason: &str| ConfigError::Invalid {
            path: origin.to_path_buf(),
            key,
            value,
            reason: reason.to_string(),
        };
        let q = self.scheduler.quantum;
        if q < QUANTUM_RANGE.0 || q > QUANTUM_RANGE.1 {
            return Err(invalid(
                "scheduler.quantum",
                format!("{q:?}"),
                "must be between 500us and 1s",
            ));
        }
        let hl = self.scheduler.high_linger;
        if hl > MAX_HIGH_LINGER {
            return Err(invalid(
                "scheduler.high_linger",
                format!("{hl:?}"),
                "must be between 0 (off) and 5ms",
            ));
        }
        let rt = self.scheduler.realtime_priority;
        if rt > MAX_REALTIME_PRIORITY {
            return Err(invalid(
                "scheduler.realtime_priority",
                rt.to_string(),
                "must be 0 (off) or a SCHED_FIFO priority from 1 to 99",
            ));
        }
        if self.metrics.enabled
            && !self.metrics.allow_remote
            && !self.metrics.listen.ip().is_loopback()
        {
            return Err(invalid(
                "metrics.listen",
                self.metrics.listen.to_string(),
                "not a loopback address (set metrics.allow_remote = true to expose it)",
            ));
        }
        if self.admission.processes_per_slice == 0 {
            return Err(invalid(
                "admission.processes_per_slice",
                "0".into(),
                "must be at least 1",
            ));
        }
        let p = self.backstop.period;
        if p < BACKSTOP_MIN_PERIOD || p > BACKSTOP_MAX_PERIOD {
            return Err(invalid(
                "backstop.period",
                format!("{p:?}"),
                "must be between 10ms and 250ms (containment within 1 s)",
            ));
        }
        if self.backstop.lease_tolerance > Duration::from_secs(1) {
            return Err(invalid(
                "backstop.lease_tolerance",
                format!("{:?}", self.backstop.lease_tolerance),
                "must be at most 1s (it is device time per second)",
            ));
        }
        let unit = self.kubernetes.device_plugin_unit.0;
        if unit == 0 || !unit.is_multiple_of(1 << 20) {
            return Err(invalid(
                "kubernetes.device_plugin_unit",
                format!("{unit} bytes"),
                "must be a whole number of MiB, at least 1Mi (e.g. \"1Gi\", \"256Mi\")",
            ));
        }
        if !self.state_dir.is_absolute() {
            return Err(invalid(
                "state_dir",
                self.state_dir.display().to_string(),
                "must be an absolute path",
            ));
        }
        Ok(())
    }
}

/// Parses `"5ms"`, `"2500us"`, `"1s"`, `"0.5ms"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("\"{text}\": not a duration (e.g. \"5ms\", \"2500us\")"))?;
    let nanos_per = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        other => {
            return Err(format!(
                "\"{text}\": unknown unit \"{other}\" (use ns, us, ms or s)"
            ))
        }
    };
    let nanos = value * nanos_per;
    if !nanos.is_finite() || !(0.0..=1e18).contains(&nanos) {
        return Err(format!("\"{text}\": out of range"));
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s).map_err(de::Error::custom)
}

fn ser_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    let us = d.as_micros();
    if us.is_multiple_of(1000) {
        s.collect_str(&format_args!("{}ms", us / 1000))
    } else {
        s.collect_str(&format_args!("{us}us"))
    }
}
