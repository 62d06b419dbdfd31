//! A `gpuslice-arbiter` for one test: its own state directory and configuration, the simulated
//! NVML, metrics off (no fixed port), fail closed.

use crate::daemon::Daemon;
use crate::paths;
use crate::scratch::Scratch;
use crate::sim::SimNode;
use anyhow::Result;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A running arbiter.
#[derive(Debug)]
pub struct Arbiter {
    /// The state directory (`--state-dir`).
    pub state_dir: PathBuf,
    /// The configuration file (`--config`).
    pub config: PathBuf,
    daemon: Daemon,
}

impl Arbiter {
    /// Write the configuration and start the arbiter; waits for its socket.
    pub fn start(scratch: &Scratch, sim: &SimNode) -> Result<Self> {
        let dir = scratch.dir("arbiter")?;
        let state_dir = dir.join("state");
        std::fs::create_dir_all(&state_dir)?;
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "state_dir = \"{}\"\nfail = \"closed\"\n\n[metrics]\nenabled = false\n",
                state_dir.display()
            ),
        )?;
        let mut c = Command::new(paths::product("gpuslice-arbiter"));
        c.arg("--state-dir")
            .arg(&state_dir)
            .arg("--config")
            .arg(&config)
            .envs(sim.host_env());
        let mut daemon = Daemon::spawn("gpuslice-arbiter", c, &dir.join("arbiter.log"), &dir)?;
        daemon.wait_socket(&state_dir.join("arbiter.sock"), Duration::from_secs(30))?;
        Ok(Self {
            state_dir,
            config,
            daemon,
        })
    }

    /// What a gpuslice binary needs in its environment to reach this arbiter.
    pub fn client_env(&self) -> Vec<(String, String)> {
        vec![
            (
                "GPUSLICE_STATE_DIR".into(),
                self.state_dir.to_string_lossy().into_owned(),
            ),
            (
                "GPUSLICE_CONFIG".into(),
                self.config.to_string_lossy().into_owned(),
            ),
        ]
    }

    /// Stop the arbiter (e.g. to test "arbiter down").
    pub fn stop(&mut self) {
        self.daemon.stop();
    }

    /// The arbiter's log.
    pub fn log(&self) -> String {
        self.daemon.log()
    }
}
