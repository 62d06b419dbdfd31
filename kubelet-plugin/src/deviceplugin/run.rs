//! `--mode device-plugin` as the binary runs it: its flags, the node-wide mode lock, the
//! plugin on NVML and the arbiter, served until SIGTERM / SIGINT.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use gpuslice_admission::fit::Policy;

use super::serve::{serve, Paths};
use super::service::{Plugin, SocketSlices};
use super::units::{parse_unit, UnitPolicy};
use super::{DEFAULT_DIR, RESOURCE};
use crate::capacity::PublishPolicy;
use crate::exclusive;
use crate::gpu::GpuSource;

/// The device plugin's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// device-plugin mode: kubelet's device plugin directory (kubelet.sock, this plugin's socket).
    #[arg(long, default_value = DEFAULT_DIR)]
    pub device_plugin_dir: PathBuf,
    /// device-plugin mode: one unit of gpuslice.io/gpu-memory (a whole number of MiB: 1Gi,
    /// 256Mi, …); overrides the node configuration's kubernetes.device_plugin_unit (1Gi).
    #[arg(long, env = "GPUSLICE_GPU_MEMORY_UNIT")]
    pub unit: Option<String>,
    /// device-plugin mode: seconds between checks of kubelet (restart), NVML and the arbiter.
    #[arg(long, default_value_t = 5)]
    pub device_plugin_poll: u64,
}

/// Everything the mode needs from the binary's common set-up.
pub struct Node {
    /// The GPUs (NVML).
    pub gpus: Arc<dyn GpuSource>,
    /// The arbiter's admission policy (node configuration).
    pub policy: Policy,
    /// Where it is followed from as the arbiter measures its contexts again (`None`: fixed).
    pub source: Option<Arc<crate::policysource::PolicySource>>,
    /// `--slices-per-gpu`.
    pub publish: PublishPolicy,
    /// The arbiter's state directory.
    pub state_dir: PathBuf,
    /// Bound on each arbiter call.
    pub arbiter_timeout: Duration,
    /// `kubernetes.device_plugin_unit` of the node configuration, bytes (checked there to be a
    /// whole number of MiB).
    pub unit: u64,
}

/// Runs the device plugin until a signal.
pub fn run(args: &Args, node: Node) -> Result<()> {
    let unit = match &args.unit {
        Some(text) => parse_unit(text)?,
        None => node.unit,
    };
    let unit_text = match &args.unit {
        Some(text) => format!("--unit {text}"),
        None => format!("kubernetes.device_plugin_unit = {unit} bytes"),
    };
    let _lock = exclusive::acquire(&node.state_dir, "device-plugin")?;
    let policy = UnitPolicy {
        unit,
        policy: node.policy,
        publish: node.publish,
    };
    let mut plugin = Plugin::new(
        policy,
        node.gpus,
        Arc::new(SocketSlices::new(&node.state_dir, node.arbiter_timeout)),
    );
    if let Some(source) = node.source {
        plugin = plugin.following(source);
    }
    let plugin = Arc::new(plugin);
    if plugin.units().iter().all(|g| g.units == 0) {
        anyhow::bail!(
            "{RESOURCE}: no GPU of this node offers a whole unit of {unit_text} ({:?})",
            plugin.units()
        );
    }
    let paths = Paths {
        dir: args.device_plugin_dir.clone(),
    };
    let poll = Duration::from_secs(args.device_plugin_poll.max(1));
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(serve(&paths, plugin, poll, crate::socket::stop_signal()))
}
