//! The simulated GPU node as every process using it must see it.
//!
//! The simulator's processes share one state file, so every process — the arbiter on the host,
//! workloads inside containers — must map the same file with the same configuration. Inside a
//! container the simulated driver plays the part of the host's driver libraries, which on a real
//! node the engine mounts in from the host: the harness bind-mounts `dist/sim` read-only at
//! [`CONTAINER_LIB_DIR`] and the state directory read-write at [`CONTAINER_STATE_DIR`], and
//! points `LD_LIBRARY_PATH` and `GPUSLICE_SIM_STATE` at them. The image itself has no driver.

use crate::paths;
use crate::scratch::Scratch;
use anyhow::Result;
use std::path::PathBuf;

/// Where the simulated driver libraries appear inside containers.
pub const CONTAINER_LIB_DIR: &str = "/usr/lib/gpuslice-sim";
/// Where the simulator's state directory appears inside containers.
pub const CONTAINER_STATE_DIR: &str = "/var/lib/gpuslice-sim";
/// The simulated device: one H100-class GPU with 80 GiB.
pub const DEVICES: &str = "name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0";
/// Total memory of the simulated device.
pub const DEVICE_MEM: u64 = 80 << 30;
/// A heterogeneous node: an H100-class GPU with 80 GiB (index 0) and an A100-class one with
/// 40 GiB (index 1).
pub const TWO_DEVICES: &str = "name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0;\
name=NVIDIA A100-SXM4-40GB,mem=40Gi,sms=108,cc=8.0";

/// A bind mount for a container.
#[derive(Debug, Clone)]
pub struct Bind {
    /// Host path.
    pub src: PathBuf,
    /// Path in the container.
    pub dst: String,
    /// Read-only.
    pub ro: bool,
}

/// One simulated node (its own state file).
#[derive(Debug)]
pub struct SimNode {
    state_dir: PathBuf,
    devices: String,
}

impl SimNode {
    /// A fresh node whose state lives in `scratch/sim`.
    pub fn new(scratch: &Scratch) -> Result<Self> {
        Self::with_devices(scratch, DEVICES)
    }

    /// A fresh node with `devices` (`GPUSLICE_SIM_DEVICES`, e.g. [`TWO_DEVICES`]).
    pub fn with_devices(scratch: &Scratch, devices: &str) -> Result<Self> {
        Ok(Self {
            state_dir: scratch.dir("sim")?,
            devices: devices.into(),
        })
    }

    /// The state file on the host.
    pub fn state_file(&self) -> PathBuf {
        self.state_dir.join("state")
    }

    /// Starts containers' work together: waits until each of `names` has created
    /// `ready-<name>` in the shared state directory (at most `limit`), then creates `go` there,
    /// which their scripts wait for (`touch …/ready-a; while [ ! -e …/go ]; do sleep 0.02; done`).
    /// Start latency would otherwise give the first one a stretch of the device alone.
    pub fn release_together(&self, names: &[&str], limit: std::time::Duration) -> Result<()> {
        let t0 = std::time::Instant::now();
        while !names
            .iter()
            .all(|n| self.state_dir.join(format!("ready-{n}")).exists())
            && t0.elapsed() < limit
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::fs::write(self.state_dir.join("go"), b"")?;
        Ok(())
    }

    /// Environment for a host process using the node (the arbiter, host-side checks).
    pub fn host_env(&self) -> Vec<(String, String)> {
        vec![
            ("GPUSLICE_SIM_DEVICES".into(), self.devices.clone()),
            (
                "GPUSLICE_SIM_STATE".into(),
                self.state_file().to_string_lossy().into_owned(),
            ),
            (
                "GPUSLICE_NVML_LIBRARY".into(),
                paths::sim_lib_dir()
                    .join("libnvidia-ml.so.1")
                    .to_string_lossy()
                    .into_owned(),
            ),
        ]
    }

    /// Environment for a process inside a container, as `KEY=VALUE`.
    pub fn container_env(&self) -> Vec<String> {
        vec![
            format!("GPUSLICE_SIM_DEVICES={}", self.devices),
            format!("GPUSLICE_SIM_STATE={CONTAINER_STATE_DIR}/state"),
            format!("LD_LIBRARY_PATH={CONTAINER_LIB_DIR}"),
        ]
    }

    /// Bind mounts a container needs.
    pub fn container_binds(&self) -> Vec<Bind> {
        vec![
            Bind {
                src: paths::sim_lib_dir(),
                dst: CONTAINER_LIB_DIR.into(),
                ro: true,
            },
            Bind {
                src: self.state_dir.clone(),
                dst: CONTAINER_STATE_DIR.into(),
                ro: false,
            },
        ]
    }
}

/// `KEY=VALUE` strings (as [`SimNode::container_env`] gives them) as `(KEY, VALUE)` pairs, what
/// CRI's `ContainerConfig.envs` takes.
pub fn env_pairs(kvs: impl IntoIterator<Item = String>) -> Vec<(String, String)> {
    kvs.into_iter()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.into(), v.into())))
        .collect()
}
