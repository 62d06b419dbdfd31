//! The environment a process needs to run on the simulated GPU from a dist tree: the loader path to
//! `sim/`, a private state file, and a device list.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A simulated node: a private state file and a device description.
pub struct SimNode {
    pub dist: PathBuf,
    pub state_dir: PathBuf,
    pub devices: String,
    /// `GPUSLICE_SIM_ENGINE` for its processes (`None`: the simulator's default).
    pub engine: Option<&'static str>,
}

impl SimNode {
    /// A node with a fresh state file under a new temporary directory.
    pub fn new(dist: &Path, devices: &str) -> std::io::Result<SimNode> {
        Self::make(dist, devices, None)
    }

    /// A node whose engine runs in `engine` mode (`timeslice` or `kernel`), with a state
    /// directory of its own, so nodes of both modes can exist side by side.
    pub fn with_engine(
        dist: &Path,
        devices: &str,
        engine: &'static str,
    ) -> std::io::Result<SimNode> {
        Self::make(dist, devices, Some(engine))
    }

    fn make(dist: &Path, devices: &str, engine: Option<&'static str>) -> std::io::Result<SimNode> {
        let suffix = engine.map(|e| format!("-{e}")).unwrap_or_default();
        let state_dir =
            std::env::temp_dir().join(format!("gpuslice-xtask-{}{suffix}", std::process::id()));
        std::fs::create_dir_all(&state_dir)?;
        let _ = std::fs::remove_file(state_dir.join("sim.state"));
        Ok(SimNode {
            dist: dist.to_path_buf(),
            state_dir,
            devices: devices.to_string(),
            engine,
        })
    }

    /// Environment variables (name, value) for processes on this node.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "LD_LIBRARY_PATH".into(),
                self.dist.join("sim").display().to_string(),
            ),
            (
                "GPUSLICE_SIM_STATE".into(),
                self.state_dir.join("sim.state").display().to_string(),
            ),
            ("GPUSLICE_SIM_DEVICES".into(), self.devices.clone()),
        ]
        .into_iter()
        .chain(
            self.engine
                .map(|e| ("GPUSLICE_SIM_ENGINE".to_string(), e.to_string())),
        )
        .collect()
    }

    /// A `gpuslice-workload` command from the dist tree with this node's environment.
    pub fn workload(&self) -> Command {
        let mut c = Command::new(self.dist.join("sim/bin/gpuslice-workload"));
        c.envs(self.env());
        c
    }

    /// The simulator's own view of this node's state (its ground truth: memory, busy time).
    pub fn open_sim(&self) -> anyhow::Result<gpuslice_sim_core::Node> {
        let env = self.env();
        let cfg = gpuslice_sim_core::SimConfig::from_lookup(|k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
        .map_err(|e| anyhow::anyhow!("simulator configuration: {e}"))?;
        gpuslice_sim_core::Node::open(cfg).map_err(|e| anyhow::anyhow!("simulator state: {e}"))
    }

    /// Path of the simulated NVML library in the dist tree.
    pub fn nvml_lib(&self) -> PathBuf {
        self.dist.join("sim/libnvidia-ml.so.1")
    }
}

impl Drop for SimNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}
