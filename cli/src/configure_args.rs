//! Command-line options of `gpuslice configure …` and `gpuslice doctor` (kept apart from
//! `args.rs` so each command's options live with their own module's owner).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

/// `gpuslice configure <engine>`.
#[derive(Subcommand, Debug)]
pub enum ConfigureCommand {
    /// Add the `gpuslice` runtime class to containerd's CRI config (versions 1, 2, 3).
    Containerd(ContainerdArgs),
    /// Add `runtimes.gpuslice` to Docker's daemon.json.
    Docker(DockerArgs),
    /// Write CRI-O's `[crio.runtime.runtimes.gpuslice]` drop-in.
    Crio(CrioArgs),
}

/// Options every engine takes.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// Print the unified diff of what would change; write nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Path of gpuslice-runtime [default: next to this gpuslice executable]
    #[arg(long, value_name = "PATH")]
    pub runtime_path: Option<PathBuf>,
    /// Make gpuslice the engine's default runtime
    #[arg(long)]
    pub default_runtime: bool,
}

/// containerd's class style.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerdStyle {
    /// runc's shim (io.containerd.runc.v2) with options.BinaryName = gpuslice-runtime
    BinaryName,
    /// runtime_type = "io.containerd.gpuslice.v2" (containerd-shim-gpuslice-v2 on containerd's PATH)
    Shim,
}

/// `gpuslice configure containerd`.
#[derive(Args, Debug)]
pub struct ContainerdArgs {
    /// containerd's main config file (not `--config`: that names gpuslice's own config)
    #[arg(
        long = "file",
        visible_alias = "containerd-config",
        value_name = "FILE",
        default_value = "/etc/containerd/config.toml"
    )]
    pub file: PathBuf,
    /// The drop-in for config versions 2 and 3 [default: <config dir>/conf.d/gpuslice.toml]
    #[arg(long, value_name = "FILE")]
    pub drop_in: Option<PathBuf>,
    /// Edit the main file instead of writing a drop-in listed in `imports`
    #[arg(long)]
    pub in_place: bool,
    /// How the class runs gpuslice
    #[arg(long, value_enum, default_value = "binary-name")]
    pub style: ContainerdStyle,
    /// Set enable_cdi = true (and cdi_spec_dirs when absent)
    #[arg(long)]
    pub enable_cdi: bool,
    /// Version of a config file created from nothing (2: containerd 1.x, 3: containerd 2.x)
    #[arg(long, value_name = "N", default_value = "2", value_parser = clap::value_parser!(i64).range(2..=3))]
    pub new_version: i64,
    /// Major version of the containerd that loads the file: 1 (the drop-in carries the whole
    /// CRI table as loaded before it), 2 (only the gpuslice class), 0 (unknown: 1.x's rule for a
    /// version 2 file, which 2.x loads too) [default: `containerd --version` on PATH]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=2))]
    pub containerd_major: Option<u32>,
    /// Undo: delete the drop-in and its `imports` entry (or, in the main file, the class)
    #[arg(long)]
    pub remove: bool,
    /// Common options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Docker's runtime style.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DockerStyle {
    /// "path": gpuslice-runtime
    Path,
    /// "runtimeType": "io.containerd.gpuslice.v2" (Docker 23+)
    RuntimeType,
}

/// `gpuslice configure docker`.
#[derive(Args, Debug)]
pub struct DockerArgs {
    /// Docker's daemon.json
    #[arg(
        long = "file",
        visible_alias = "docker-config",
        value_name = "FILE",
        default_value = "/etc/docker/daemon.json"
    )]
    pub file: PathBuf,
    /// How Docker runs gpuslice
    #[arg(long, value_enum, default_value = "path")]
    pub style: DockerStyle,
    /// Set "features": {"cdi": true} (Docker 25+)
    #[arg(long)]
    pub enable_cdi: bool,
    /// Common options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `gpuslice configure crio`.
#[derive(Args, Debug)]
pub struct CrioArgs {
    /// The CRI-O drop-in to write
    #[arg(
        long = "file",
        visible_alias = "crio-config",
        value_name = "FILE",
        default_value = "/etc/crio/crio.conf.d/99-gpuslice.conf"
    )]
    pub file: PathBuf,
    /// Common options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `gpuslice doctor`.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// NVML library to load [default: libnvidia-ml.so.1, or the config's nvml_library]
    #[arg(long, env = "GPUSLICE_NVML_LIBRARY", value_name = "FILE")]
    pub nvml_library: Option<PathBuf>,
    /// The interposer [default: ../lib/gpuslice/libgpuslice.so beside this executable, or the config's]
    #[arg(long, value_name = "FILE")]
    pub interposer: Option<PathBuf>,
    /// The CDI spec
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/run/cdi/gpuslice.yaml"
    )]
    pub cdi_spec: PathBuf,
    /// containerd's main config
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/containerd/config.toml"
    )]
    pub containerd_config: PathBuf,
    /// containerd's gRPC socket [default: the config's grpc.address, else /run/containerd/containerd.sock]
    #[arg(long, value_name = "SOCKET")]
    pub containerd_address: Option<PathBuf>,
    /// Docker's daemon.json
    #[arg(long, value_name = "FILE", default_value = "/etc/docker/daemon.json")]
    pub docker_config: PathBuf,
    /// dockerd's socket [default: daemon.json's first unix:// host, else /var/run/docker.sock]
    #[arg(long, value_name = "SOCKET")]
    pub docker_socket: Option<PathBuf>,
    /// CRI-O's configuration directory (crio.conf.d)
    #[arg(long, value_name = "DIR", default_value = "/etc/crio/crio.conf.d")]
    pub crio_dir: PathBuf,
    /// Internal: dlopen FILE and exit 0 if it loads (run by doctor in a child process).
    #[arg(long, hide = true, value_name = "FILE")]
    pub dlopen_probe: Option<PathBuf>,
}
