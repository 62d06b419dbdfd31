//! `gpuslice-arbiter`: the node daemon. Runs in the foreground, logs to stderr, serves the control
//! protocol (`docs/protocol.md`) on `<state-dir>/arbiter.sock` from the admission state, and
//! persists slices under the state directory so a restart carries on. Each slice gets its region
//! files and a place in its devices' lease schedulers (`sched`), which enforce compute shares at
//! kernel launches through the interposer's gate.

// As in the library (`lib.rs`): no silent narrowing or sign-changing `as`.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
// Functions with one job each: none over 100 lines (clippy.toml); a new one fails the lint.
#![warn(clippy::too_many_lines)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use clap::Parser;
use gpuslice_api::config::DEFAULT_CONFIG_PATH;
use gpuslice_api::protocol::SOCKET_NAME;
use gpuslice_api::Config;
use gpuslice_arbiter::nvml::NvmlInventory;
use gpuslice_arbiter::server::{bind, serve, State};
use gpuslice_arbiter::store::Store;
use gpuslice_arbiter::DeviceInventory;

/// gpuslice node arbiter: admission and placement of GPU slices.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// State directory (slice directories and arbiter.sock) [default: from config, /run/gpuslice]
    #[arg(long, env = "GPUSLICE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Configuration file [default: /etc/gpuslice/config.toml; missing means defaults]
    #[arg(long, env = "GPUSLICE_CONFIG")]
    config: Option<PathBuf>,
    /// Internal: be the probe child that holds one context per device (`contexts.rs`).
    #[arg(long = "probe-contexts", hide = true)]
    probe_contexts: bool,
}

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    if cli.probe_contexts {
        if let Err(e) = gpuslice_arbiter::contexts::probe_child() {
            eprintln!("{e}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(e) = run(cli) {
        tracing::error!("gpuslice-arbiter: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    // Before any thread: the stop signals are taken by one thread only.
    let stop = gpuslice_arbiter::shutdown::block().context("blocking SIGTERM/SIGINT")?;
    // Tenants can truncate their `usage` files; reading one must not kill the daemon (SIGBUS).
    if let Err(e) = gpuslice_region::sigbus::install() {
        tracing::warn!("cannot install the SIGBUS guard for usage files: {e}");
    }
    let (path, explicit) = match &cli.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
    };
    let mut config = Config::load(&path, explicit)?;
    if let Some(dir) = cli.state_dir {
        if !dir.is_absolute() {
            bail!("--state-dir {}: must be an absolute path", dir.display());
        }
        config.state_dir = dir;
    }
    // Before NVML or any thread: capabilities are per thread (docs/privileges.md).
    drop_capabilities(&config)?;
    // GPUSLICE_NVML_LIBRARY, the config's nvml_library, or NVML found through the loader cache
    // under GPUSLICE_DRIVER_ROOT (the node's / in a Kubernetes Pod, docs/kubernetes.md).
    config.nvml_library = gpuslice_cdi::driver_root::nvml_library(config.nvml_library.as_deref())?;
    if let Some(lib) = &config.nvml_library {
        tracing::info!("NVML: {}", lib.display());
    }
    let inventory = NvmlInventory::open(config.nvml_library.as_deref())?;
    let devices = inventory.devices()?;
    for d in &devices {
        tracing::info!(
            "device {}: {} {} ({} MiB)",
            d.index,
            d.uuid,
            d.name,
            d.memory_total >> 20
        );
    }
    if devices.is_empty() {
        tracing::warn!("NVML reports no GPU: every admit will be refused");
    }
    let store = Store::open(&config.state_dir)
        .with_context(|| format!("state directory {}", config.state_dir.display()))?;
    let contexts = measure_contexts(&inventory, &devices, &config.state_dir);
    let policy = gpuslice_arbiter::contexts::policy_for(&config.admission, &contexts);
    for f in &contexts {
        tracing::info!(
            "device {}: each process is charged {} MiB for its context and modules",
            f.index,
            policy.charge_on(f.index) >> 20
        );
    }
    let (state, warnings) = State::open(devices, policy, store)
        .with_context(|| format!("reading slices in {}", config.state_dir.display()))?;
    let state = state.with_contexts(contexts);
    for w in warnings {
        tracing::warn!("{w}");
    }
    tracing::info!(
        "restored {} slice(s) from {}",
        state.admission().slices().count(),
        config.state_dir.display()
    );
    let mut state = state;
    // Old kernels and sandboxes: say once which newer syscalls are replaced by fallbacks.
    for f in gpuslice_arbiter::syscalls::fallbacks_in_use() {
        tracing::warn!("kernel fallback: {f}");
    }
    let sched = Arc::new(
        gpuslice_arbiter::sched::Scheduler::with_realtime(
            config.scheduler.quantum,
            config.scheduler.realtime_priority,
        )
        .with_high_linger(config.scheduler.high_linger)
        .with_high_repay_turns(config.scheduler.high_repay_turns),
    );
    if let Some(f) = std::env::var_os("GPUSLICE_SCHED_STATUS_FILE") {
        gpuslice_arbiter::sched::spawn_status_file(Arc::clone(&sched), PathBuf::from(f));
    }
    for w in state.attach_scheduler(sched) {
        tracing::warn!("{w}");
    }
    tracing::info!(
        "time-slicing with a {:?} quantum{}",
        config.scheduler.quantum,
        match config.scheduler.realtime_priority {
            0 => String::new(),
            p => format!(", device threads SCHED_FIFO priority {p}"),
        }
    );
    let sock = config.state_dir.join(SOCKET_NAME);
    let listener = bind(&sock).with_context(|| format!("binding {}", sock.display()))?;
    tracing::info!("serving {}", sock.display());
    let state = Arc::new(Mutex::new(state));
    gpuslice_arbiter::shutdown::spawn(stop, Arc::clone(&state), sock.clone())
        .context("starting the shutdown thread")?;
    gpuslice_arbiter::reclaim::spawn(
        Arc::clone(&state),
        gpuslice_arbiter::reclaim::ReclaimConfig::new(&config.state_dir),
    )
    .context("starting the reclaim loop")?;
    spawn_backstop(&state, &config);
    spawn_metrics(&state, &config);
    serve(listener, state)?;
    Ok(())
}

/// Keeps only the capabilities the configuration needs, and sets no_new_privs.
fn drop_capabilities(config: &Config) -> Result<()> {
    let keep = gpuslice_arbiter::privileges::keep_for(config);
    match gpuslice_privileges::restrict_to(&keep).context("dropping capabilities")? {
        gpuslice_privileges::Restricted::NotRoot => {
            tracing::debug!("not root: capabilities left as they are")
        }
        gpuslice_privileges::Restricted::Dropped { kept, missing } => {
            tracing::debug!(
                "capabilities kept: {}; no_new_privs set",
                gpuslice_privileges::names(&kept)
            );
            if !missing.is_empty() {
                tracing::warn!(
                    "capabilities wanted but not held: {}",
                    gpuslice_privileges::names(&missing)
                );
            }
        }
    }
    Ok(())
}

/// The backstop's loop, when enabled; a failure to start it is logged, not fatal.
fn spawn_backstop(state: &Arc<Mutex<State>>, config: &Config) {
    if config.backstop.enabled {
        match gpuslice_arbiter::backstop::spawn(
            Arc::clone(state),
            config.backstop.clone(),
            config.nvml_library.as_deref(),
            &config.state_dir,
        ) {
            Ok(_) => tracing::info!(
                "backstop every {:?}: memory over cap -> {}, kernels without the lease -> {}",
                config.backstop.period,
                config.backstop.memory_action.as_str(),
                config.backstop.lease_action.as_str()
            ),
            Err(e) => tracing::error!("backstop disabled: {e}"),
        }
    }
}

/// The metrics endpoint, when enabled: a taken port is logged, not fatal.
fn spawn_metrics(state: &Arc<Mutex<State>>, config: &Config) {
    if config.metrics.enabled {
        let src = gpuslice_arbiter::metrics::Sources {
            state: Arc::clone(state),
            state_dir: config.state_dir.clone(),
            sched: state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .scheduler()
                .cloned()
                .map(|s| Arc::new(move || s.status()) as gpuslice_arbiter::metrics::SchedSource),
        };
        // Metrics are not worth refusing admission for: a taken port is logged, not fatal.
        match gpuslice_arbiter::metrics::spawn(config.metrics.listen, src) {
            Ok(addr) => tracing::info!("metrics on http://{addr}/metrics"),
            Err(e) => tracing::error!(
                "metrics disabled: cannot listen on {}: {e} (set [metrics] listen)",
                config.metrics.listen
            ),
        }
    }
}

/// Each device's context footprint: a probe context now, else the saved or assumed figure
/// (`contexts.rs`); kept in the state directory for the next start and the kubelet plugin.
fn measure_contexts(
    nvml: &NvmlInventory,
    devices: &[gpuslice_arbiter::DeviceInfo],
    state_dir: &std::path::Path,
) -> Vec<gpuslice_arbiter::contexts::Footprint> {
    use gpuslice_arbiter::contexts;
    // GPUSLICE_CUDA_LIBRARY, or libcuda.so.1 found through the loader cache under
    // GPUSLICE_DRIVER_ROOT (the node's / in the DaemonSet's Pod), or the loader's own search.
    let probe = std::env::current_exe()
        .map_err(|e| format!("own executable: {e}"))
        .and_then(|exe| {
            let lib = gpuslice_cdi::driver_root::cuda_library().map_err(|e| e.to_string())?;
            if let Some(l) = &lib {
                tracing::info!("CUDA driver for the probe context: {}", l.display());
            }
            contexts::probe(&exe, lib.as_deref(), |pid| nvml.memory_of(pid))
        });
    let (list, warnings) = contexts::resolve(
        devices,
        &nvml.driver_version(),
        probe,
        contexts::load(state_dir),
    );
    for w in warnings {
        tracing::warn!("{w}");
    }
    for f in &list {
        tracing::info!(
            "device {}: a CUDA context holds {} MiB ({}, driver {})",
            f.index,
            f.bytes >> 20,
            f.source,
            f.driver
        );
    }
    if let Err(e) = contexts::save(state_dir, &list) {
        tracing::warn!(
            "cannot keep the context footprints in {}: {e}",
            state_dir.display()
        );
    }
    list
}
