//! The command line (clap): global `--state-dir` / `--config`, and the subcommands `run`,
//! `status`, `update`, `cdi generate`, `configure` and `doctor` (the configure options:
//! `configure_args`).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// gpuslice: share NVIDIA GPUs with memory caps and compute shares.
#[derive(Parser, Debug)]
#[command(name = "gpuslice", version, about)]
pub struct Cli {
    /// State directory (slice directories and arbiter.sock) [default: from config, /run/gpuslice]
    #[arg(long, global = true, env = "GPUSLICE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Configuration file [default: /etc/gpuslice/config.toml; missing means defaults]
    #[arg(long, global = true, env = "GPUSLICE_CONFIG")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command in a new slice (bare process, no container).
    Run(RunArgs),
    /// Show devices and slices.
    Status(StatusArgs),
    /// Change a running slice's memory cap, compute share or priority.
    Update(UpdateArgs),
    /// CDI spec generation.
    Cdi {
        /// `generate`.
        #[command(subcommand)]
        command: CdiCommand,
    },
    /// Configure a container engine for gpuslice (containerd, docker, crio).
    Configure {
        /// The engine.
        #[command(subcommand)]
        engine: crate::configure_args::ConfigureCommand,
    },
    /// Check the node: driver, NVML, arbiter, interposer, CDI spec, engines.
    Doctor(crate::configure_args::DoctorArgs),
}

/// `gpuslice cdi …`.
#[derive(Subcommand, Debug)]
pub enum CdiCommand {
    /// Write the CDI spec (kind gpuslice.io/gpu) for this node's GPUs.
    Generate(CdiGenerateArgs),
}

/// `gpuslice cdi generate` options.
#[derive(Args, Debug, Clone)]
pub struct CdiGenerateArgs {
    /// Where to write the spec (atomically).
    #[arg(long, default_value = "/var/run/cdi/gpuslice.yaml")]
    pub output: PathBuf,
    /// yaml or json.
    #[arg(long, default_value = "yaml", value_parser = ["yaml", "json"])]
    pub format: String,
    /// Root the driver's libraries (its etc/ld.so.cache) and binaries are found under.
    #[arg(long, default_value = "/")]
    pub driver_root: PathBuf,
    /// Directory holding the NVIDIA device nodes.
    #[arg(long, default_value = "/dev")]
    pub dev_root: PathBuf,
    /// Host file bound at /etc/ld.so.preload (written when missing); default: beside the interposer.
    #[arg(long)]
    pub preload_file: Option<PathBuf>,
}

/// What a slice asks for, as options (same syntax as the `gpuslice.io/*` annotations).
#[derive(Args, Debug, Default, Clone)]
pub struct RequestArgs {
    // Values may start with '-' so that `--memory -1` reaches our parser, which names the option
    // and says why, instead of clap's "unexpected argument '-1'".
    /// Memory cap per device: 512Mi, 8Gi, 1G, bytes, or 25% of the device (100% is all one
    /// slice can be promised: the device less the context reserve)
    #[arg(long, value_name = "QUANTITY", allow_hyphen_values = true)]
    pub memory: Option<String>,
    /// Guaranteed share of the GPU's time, percent 1-100 [default: best effort]
    #[arg(long, value_name = "PERCENT", allow_hyphen_values = true)]
    pub compute: Option<String>,
    /// Ceiling on the share, percent 1-100 [default: 100]
    #[arg(long, value_name = "PERCENT", allow_hyphen_values = true)]
    pub compute_limit: Option<String>,
    /// high, normal or low [default: normal]
    #[arg(long, value_name = "PRIORITY")]
    pub priority: Option<String>,
}

/// `gpuslice run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The request.
    #[command(flatten)]
    pub request: RequestArgs,
    /// A device count (1, 2) or a list of indices / UUIDs (0,1 or GPU-…) [default: 1]
    #[arg(long, value_name = "DEVICES")]
    pub devices: Option<String>,
    /// Only devices whose name contains this (H100, A100)
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `gpuslice status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Redraw every interval until Ctrl-C, like top
    #[arg(long)]
    pub watch: bool,
    /// Refresh interval for --watch (500ms, 1s, 2s)
    #[arg(long, default_value = "1s", requires = "watch", value_parser = parse_interval)]
    pub interval: std::time::Duration,
}

fn parse_interval(s: &str) -> Result<std::time::Duration, String> {
    let d = gpuslice_api::config::parse_duration(s)?;
    if d < std::time::Duration::from_millis(100) {
        return Err(format!("\"{s}\": must be at least 100ms"));
    }
    Ok(d)
}

/// `gpuslice update`.
#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// The slice id (as shown by `gpuslice status`)
    pub slice: String,
    /// The changes (`--compute 0` makes the slice best effort).
    #[command(flatten)]
    pub request: RequestArgs,
}
