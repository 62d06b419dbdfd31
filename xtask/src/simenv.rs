//! The environment a process needs to run on the simulated GPU from a dist tree: the loader path to
//! `sim/`, a private state file, and a device list.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A simulated node: a private state file and a device description.
pub struct SimNode {
    pub dist: PathBuf,
    pub state_dir: PathBuf,
    pub devices: String,
}

impl SimNode {
    /// A node with a fresh state file under a new temporary directory.
    pub fn new(dist: &Path, devices: &str) -> std::io::Result<SimNode> {
        let state_dir = std::env::temp_dir().join(format!("gpuslice-xtask-{}", std::process::id()));
        std::fs::create_dir_all(&state_dir)?;
        let _ = std::fs::remove_file(state_dir.join("sim.state"));
        Ok(SimNode {
            dist: dist.to_path_buf(),
            state_dir,
            devices: devices.to_string(),
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
    }

    /// A `gpuslice-workload` command from the dist tree with this node's environment.
    pub fn workload(&self) -> Command {
        let mut c = Command::new(self.dist.join("sim/bin/gpuslice-workload"));
        c.envs(self.env());
        c
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
