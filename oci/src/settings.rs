//! Where things are: state directory, configuration, the interposer and the hook on the host,
//! resolved the way every gpuslice binary does (`--state-dir` / `GPUSLICE_STATE_DIR`,
//! `--config` / `GPUSLICE_CONFIG`, paths relative to the running executable).

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuslice_api::config::DEFAULT_CONFIG_PATH;
use gpuslice_api::{Config, ConfigError, FailMode};

use gpuslice_api::client::DEFAULT_TIMEOUT;

/// Everything the edit step needs to know about the node.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The configuration as loaded.
    pub config: Config,
    /// The configuration file named explicitly, to pass on to the hook.
    pub config_path: Option<PathBuf>,
    /// State directory (`arbiter.sock`, slice directories).
    pub state_dir: PathBuf,
    /// The interposer on the host.
    pub interposer: PathBuf,
    /// `gpuslice-hook` on the host.
    pub hook: PathBuf,
    /// Where device nodes are looked up (`/dev`).
    pub dev_root: PathBuf,
    /// Bound on every arbiter call.
    pub timeout: Duration,
    /// Whether the edit adds the `createRuntime` (bind) and `poststop` (release) hooks. True by
    /// default; `gpuslice-runtime` turns it off for a `create` it can bind and release itself
    /// (it knows the pid from `--pid-file` and sees the `delete`), saving two hook processes.
    pub lifecycle_hooks: bool,
}

/// `../lib/gpuslice/libgpuslice.so` and `gpuslice-hook` relative to `exe`.
pub fn beside_exe(exe: &Path) -> (PathBuf, PathBuf) {
    let dir = exe.parent().unwrap_or(Path::new("/"));
    (
        dir.join("../lib/gpuslice/libgpuslice.so"),
        dir.join("gpuslice-hook"),
    )
}

impl Settings {
    /// Loads the configuration (`config`: explicit path, else `GPUSLICE_CONFIG`, else the default
    /// path where a missing file means defaults) and resolves paths.
    pub fn load(
        config: Option<PathBuf>,
        state_dir: Option<PathBuf>,
    ) -> Result<Settings, ConfigError> {
        let explicit = config.or_else(|| std::env::var_os("GPUSLICE_CONFIG").map(PathBuf::from));
        let cfg = match &explicit {
            Some(p) => Config::load(p, true)?,
            None => Config::load(Path::new(DEFAULT_CONFIG_PATH), false)?,
        };
        Ok(Settings::from_config(cfg, explicit, state_dir))
    }

    /// Resolves paths for an already-loaded configuration.
    pub fn from_config(
        config: Config,
        config_path: Option<PathBuf>,
        state_dir: Option<PathBuf>,
    ) -> Settings {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/usr/bin/x"));
        let (interposer, hook) = beside_exe(&exe);
        let state_dir = state_dir
            .or_else(|| std::env::var_os("GPUSLICE_STATE_DIR").map(PathBuf::from))
            .unwrap_or_else(|| config.state_dir.clone());
        Settings {
            interposer: config.interposer.clone().unwrap_or(interposer),
            hook: config.runtime.hook.clone().unwrap_or(hook),
            config_path,
            state_dir,
            dev_root: PathBuf::from("/dev"),
            timeout: DEFAULT_TIMEOUT,
            lifecycle_hooks: true,
            config,
        }
    }

    /// Whether an unreachable arbiter lets containers start unedited.
    pub fn fail_open(&self) -> bool {
        self.config.fail == FailMode::Open
    }
}
