//! `gpuslice-hook`: the OCI hook `gpuslice-runtime` adds to containers with a slice. It reads
//! the container state (OCI `state` JSON) from stdin.
//!
//! * `create-runtime`: tells the arbiter the container's real pid (`state.pid`) and cgroup
//!   (from `/proc/<pid>/cgroup`), so the arbiter can release the slice when the container is
//!   gone even if `poststop` never runs.
//! * `poststop`: releases the slice. A slice that is already gone is success (idempotent).
//! * `--standalone create-runtime` / `prestart`: for CDI specs and `hooks.d` without the
//!   runtime wrapper: reads the request from the bundle's `config.json`, admits, mounts the
//!   slice into the container ([`standalone`], [`nsmount`]) and binds.
//!
//! Every arbiter call is bounded (`--timeout`, default 5 s); so is reading stdin. Reference:
//! `docs/runtime.md`.

mod nsmount;
mod privileges;
mod standalone;

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::{Parser, Subcommand};
use gpuslice_api::client::{BindResult, Client, ClientError};
use gpuslice_api::ErrorCode;
use gpuslice_oci::hook_state::{self as state, State};
use gpuslice_oci::ident::slice_id_for;
use gpuslice_oci::lifecycle::cgroup_of;
use gpuslice_oci::Settings;

/// Largest state document read from stdin.
const MAX_STATE: u64 = 1 << 20;

#[derive(Parser, Debug)]
#[command(
    name = "gpuslice-hook",
    version,
    about = "OCI hook for gpuslice slices"
)]
struct Cli {
    /// State directory (arbiter.sock).
    #[arg(long, env = "GPUSLICE_STATE_DIR", global = true)]
    state_dir: Option<PathBuf>,
    /// Configuration file.
    #[arg(long, env = "GPUSLICE_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// The slice; default: derived from the container id in the state.
    #[arg(long, global = true)]
    slice_id: Option<String>,
    /// Bound on reading stdin and on each arbiter call, seconds.
    #[arg(long, default_value_t = 5, global = true)]
    timeout: u64,
    /// Standalone mode (CDI, hooks.d): `create-runtime` also reads the request, admits and
    /// mounts the slice into the container.
    #[arg(long, global = true)]
    standalone: bool,
    /// procfs root (tests).
    #[arg(long, default_value = "/proc", hide = true, global = true)]
    proc_root: PathBuf,
    #[command(subcommand)]
    stage: Stage,
}

#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// createRuntime: bind the container's pid and cgroup to its slice.
    CreateRuntime,
    /// poststop: release the slice (a missing slice is success).
    Poststop,
    /// prestart: the same as `--standalone create-runtime` (hooks.d of engines whose hooks
    /// stages stop at prestart).
    Prestart,
    /// Internal: enter the mount namespace of `pid` and mount the slice (single-threaded child).
    #[command(hide = true)]
    MountSlice {
        #[arg(long)]
        pid: u32,
        #[arg(long)]
        rootfs: PathBuf,
        #[arg(long)]
        slice_dir: PathBuf,
    },
}

fn read_state(timeout: Duration) -> Result<State> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let r = std::io::stdin()
            .take(MAX_STATE)
            .read_to_end(&mut buf)
            .map(|_| buf);
        let _ = tx.send(r);
    });
    let bytes = rx
        .recv_timeout(timeout)
        .map_err(|_| anyhow!("no container state on stdin within {timeout:?}"))?
        .context("reading the container state from stdin")?;
    Ok(state::parse(&bytes)?)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any thread exists: capabilities are per thread (docs/privileges.md).
    let standalone = (cli.standalone && cli.stage == Stage::CreateRuntime)
        || matches!(cli.stage, Stage::Prestart | Stage::MountSlice { .. });
    if let Err(e) = privileges::restrict(standalone) {
        eprintln!("gpuslice-hook: {e:#}");
        return ExitCode::FAILURE;
    }
    // Before any thread exists: setns(CLONE_NEWNS) refuses multi-threaded callers.
    if let Stage::MountSlice {
        pid,
        rootfs,
        slice_dir,
    } = &cli.stage
    {
        return match nsmount::mount_slice(*pid, rootfs, slice_dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gpuslice-hook: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuslice-hook: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<()> {
    let timeout = Duration::from_secs(cli.timeout.max(1));
    let mut settings = Settings::load(cli.config.clone(), cli.state_dir.clone())?;
    settings.timeout = timeout;
    let state = read_state(timeout)?;
    let explicit = cli.slice_id.is_some();
    let slice_id = cli
        .slice_id
        .clone()
        .unwrap_or_else(|| slice_id_for(&state.id));
    let standalone_create =
        cli.stage == Stage::Prestart || (cli.standalone && cli.stage == Stage::CreateRuntime);
    if standalone_create {
        let done = standalone::create(
            &settings,
            &state.id,
            state.pid,
            state.bundle.as_deref(),
            &slice_id,
            &cli.proc_root,
        )
        .with_context(|| format!("container {}", state.id))?;
        if let standalone::Done::FailedOpen(why) = done {
            eprintln!(
                "gpuslice-hook: warning: {why}; fail = \"open\": container {} starts without a slice (the interposer enforces GPUSLICE_MEMORY alone)",
                state.id
            );
        }
        return Ok(());
    }
    let mut client = Client::connect(&settings.state_dir, timeout)?;
    match cli.stage {
        Stage::CreateRuntime => {
            let pid = state
                .pid
                .ok_or_else(|| anyhow!("container {}: the state has no pid", state.id))?;
            let cgroup = cgroup_of(&cli.proc_root, pid);
            // The Pod of a container whose slice was admitted before it existed (DRA, device
            // plugin): from the CRI runtime's annotations, for the slice's metric labels.
            let pod = state
                .bundle
                .as_deref()
                .and_then(|b| standalone::read_config(b).ok())
                .and_then(|doc| gpuslice_api::PodRef::from_annotations(&doc.annotations()));
            match client.bind_pod(&slice_id, Some(pid), cgroup.as_deref(), pod) {
                Ok(BindResult::Bound) => Ok(()),
                Ok(BindResult::Unsupported(m)) => {
                    eprintln!(
                        "gpuslice-hook: warning: the arbiter does not support bind ({m}); slice \"{slice_id}\" is released at poststop only"
                    );
                    Ok(())
                }
                Err(ClientError::Arbiter {
                    code: ErrorCode::NotFound,
                    ..
                }) if !explicit => Ok(()), // hooks.d: this container has no slice
                Err(e) => Err(anyhow!("slice \"{slice_id}\": bind pid {pid}: {e}")),
            }
        }
        Stage::Poststop => {
            client
                .release(&slice_id)
                .map_err(|e| anyhow!("slice \"{slice_id}\": release: {e}"))?;
            Ok(())
        }
        Stage::Prestart | Stage::MountSlice { .. } => Ok(()),
    }
}
