//! `gpuslice-kubelet-plugin`: the kubelet plugin of gpuslice. `--mode dra` (the default): the
//! DRA driver `gpuslice.io` — this node's ResourceSlices published through the API server,
//! registration socket, DRA node service v1 / v1beta1, claims read from the API server, slices
//! admitted at the arbiter, one CDI spec per claim. `--mode device-plugin`: the device plugin of
//! `gpuslice.io/gpu-memory` (`deviceplugin::run`). Logs to stderr.

// Functions with one job each: a product function over 100 lines (clippy.toml) is split, or
// carries an `allow` saying why it must not be.
#![warn(clippy::too_many_lines)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use gpuslice_admission::fit::Policy;
use gpuslice_kubelet_plugin::capacity::{PublishPolicy, DEFAULT_SLICES_PER_GPU};
use gpuslice_kubelet_plugin::deviceplugin;
use gpuslice_kubelet_plugin::dra::apiserver::{self, ApiClaims};
use gpuslice_kubelet_plugin::dra::arbiter::SocketArbiter;
use gpuslice_kubelet_plugin::dra::cdi::CdiDir;
use gpuslice_kubelet_plugin::dra::checkpoint;
use gpuslice_kubelet_plugin::dra::claim::{ClaimSource, DirClaims};
use gpuslice_kubelet_plugin::dra::driver::{Driver, Parts};
use gpuslice_kubelet_plugin::dra::publish::Publisher;
use gpuslice_kubelet_plugin::dra::resourceslice::resource_slices;
use gpuslice_kubelet_plugin::dra::serve::{serve, Sockets};
use gpuslice_kubelet_plugin::dra::slicewatch;
use gpuslice_kubelet_plugin::dra::validate;
use gpuslice_kubelet_plugin::gpu::GpuSource;
use gpuslice_kubelet_plugin::nvml::NvmlGpus;
use gpuslice_kubelet_plugin::policysource::PolicySource;
use gpuslice_oci::Settings;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Kubernetes Dynamic Resource Allocation driver `gpuslice.io`.
    Dra,
    /// Kubernetes device plugin of the extended resource `gpuslice.io/gpu-memory`.
    DevicePlugin,
}

#[derive(Parser, Debug)]
#[command(
    name = "gpuslice-kubelet-plugin",
    version,
    about = "gpuslice kubelet plugin"
)]
struct Cli {
    /// Which plugin to run.
    #[arg(long, value_enum, default_value = "dra")]
    mode: Mode,
    #[command(flatten)]
    device_plugin: deviceplugin::run::Args,
    /// State directory (arbiter.sock).
    #[arg(long, env = "GPUSLICE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Node configuration file (the arbiter's admission settings are read from it).
    #[arg(long, env = "GPUSLICE_CONFIG")]
    config: Option<PathBuf>,
    /// This node's name: the pool name of its ResourceSlices.
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// kubelet's plugin registration directory.
    #[arg(long, default_value = "/var/lib/kubelet/plugins_registry")]
    registry_dir: PathBuf,
    /// This plugin's directory (DRA socket, checkpoint).
    #[arg(long, default_value = "/var/lib/kubelet/plugins/gpuslice.io")]
    plugin_dir: PathBuf,
    /// Where the per-claim CDI specs are written.
    #[arg(long, default_value = "/var/run/cdi")]
    cdi_dir: PathBuf,
    /// Derive each claim's CDI spec from the node's own spec (`gpuslice cdi generate`'s, with
    /// host paths) instead of discovering the driver under --driver-root / --dev-root: for a
    /// plugin in a container, which does not see the host at its paths.
    #[arg(long)]
    node_cdi_spec: Option<PathBuf>,
    /// Claims per GPU at most; the context reserves of that many slices are set aside.
    #[arg(long, default_value_t = DEFAULT_SLICES_PER_GPU, value_parser = clap::value_parser!(u32).range(1..=100))]
    slices_per_gpu: u32,
    /// Root the driver's libraries are found under.
    #[arg(long, default_value = "/")]
    driver_root: PathBuf,
    /// Directory holding the device nodes.
    #[arg(long, default_value = "/dev")]
    dev_root: PathBuf,
    /// Bound on each arbiter call, seconds.
    #[arg(long, default_value_t = 5)]
    arbiter_timeout: u64,
    /// Read ResourceClaims from `<DIR>/<namespace>/<name>.json` instead of the API server, and
    /// publish no ResourceSlices (a node driven by hand, without a cluster).
    #[arg(long)]
    claims_from: Option<PathBuf>,
    /// kubeconfig to reach the API server with (its current context); default: the Pod's
    /// service account (in-cluster configuration).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Bound on each API server request, seconds.
    #[arg(long, default_value_t = 10)]
    api_timeout: u64,
    /// How often the GPUs are listed for changes (appeared, gone, unhealthy), seconds.
    #[arg(long, default_value_t = 10)]
    device_poll: u64,
    /// How often the published ResourceSlices are checked against the node anyway (repairs
    /// slices changed or deleted by someone else), seconds.
    #[arg(long, default_value_t = 300)]
    resync: u64,
    /// Print this node's ResourceSlices (JSON) and exit.
    #[arg(long)]
    print_resource_slices: bool,
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    // Paths and configuration resolved the way every gpuslice binary does.
    let settings = Settings::load(cli.config.clone(), cli.state_dir.clone())?;
    // Before NVML or the async runtime: capabilities are per thread (docs/privileges.md).
    gpuslice_kubelet_plugin::privileges::drop_all().context("dropping capabilities")?;
    let config = &settings.config;
    // As the arbiter: GPUSLICE_NVML_LIBRARY, the config's, or the driver root's loader cache.
    let nvml = gpuslice_cdi::driver_root::nvml_library(config.nvml_library.as_deref())?;
    let gpus: Arc<dyn GpuSource> = Arc::new(NvmlGpus::open(nvml.as_deref())?);
    // The arbiter's charges: its measured context footprints (capacity.rs), followed as the
    // arbiter measures them again (policysource.rs).
    let source = Arc::new(PolicySource::following(
        &config.admission,
        &settings.state_dir,
    ));
    let policy: Policy = source.current();
    let publish = PublishPolicy {
        slices_per_gpu: cli.slices_per_gpu,
    };
    if cli.mode == Mode::DevicePlugin {
        return deviceplugin::run::run(
            &cli.device_plugin,
            deviceplugin::run::Node {
                gpus,
                policy,
                source: Some(source),
                publish,
                state_dir: settings.state_dir.clone(),
                arbiter_timeout: Duration::from_secs(cli.arbiter_timeout.max(1)),
                unit: config.kubernetes.device_plugin_unit.0,
            },
        );
    }
    if cli.print_resource_slices {
        return print_resource_slices(&cli.node_name, gpus.as_ref(), &policy, &publish);
    }
    let _mode_lock = gpuslice_kubelet_plugin::exclusive::acquire(&settings.state_dir, "dra")?;
    let options = cdi_options(&cli, &settings);
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let api_timeout = Duration::from_secs(cli.api_timeout.max(1));
    let (client, watch_client) = match &cli.claims_from {
        Some(_) => (None, None),
        None => (
            Some(rt.block_on(apiserver::connect(cli.kubeconfig.as_deref(), api_timeout))?),
            // Watches get their own client: one read waits up to a whole watch.
            Some(rt.block_on(apiserver::connect_for_watch(
                cli.kubeconfig.as_deref(),
                api_timeout,
            ))?),
        ),
    };
    let claims: Arc<dyn ClaimSource> = match (&cli.claims_from, &client) {
        (Some(dir), _) => Arc::new(DirClaims(dir.clone())),
        (None, Some(c)) => Arc::new(ApiClaims::new(c.clone(), rt.handle().clone(), api_timeout)),
        (None, None) => unreachable!("a client is made when no --claims-from is given"),
    };
    let publisher = client.map(|c| {
        Publisher::new(c, &cli.node_name, gpus.clone(), policy.clone(), publish)
            .following(source.clone())
    });
    let driver = Driver::new(Parts {
        node: cli.node_name.clone(),
        gpus,
        policy,
        publish,
        claims,
        arbiter: Arc::new(SocketArbiter::new(
            &settings.state_dir,
            Duration::from_secs(cli.arbiter_timeout.max(1)),
        )),
        cdi: Arc::new(CdiDir {
            dir: cli.cdi_dir.clone(),
            options,
            node_spec: cli.node_cdi_spec.clone(),
        }),
        checkpoint: cli.plugin_dir.join(checkpoint::FILE),
    })?
    .following(source);
    let sockets = Sockets {
        registry_dir: cli.registry_dir.clone(),
        plugin_dir: cli.plugin_dir.clone(),
    };
    let poll = Duration::from_secs(cli.device_poll.max(1));
    let resync = Duration::from_secs(cli.resync.max(1));
    rt.block_on(run_dra(
        sockets,
        driver,
        publisher,
        watch_client,
        poll,
        resync,
    ))
}

/// `--print-resource-slices`: this node's ResourceSlices as JSON on stdout, each validated.
fn print_resource_slices(
    node: &str,
    gpus: &dyn GpuSource,
    policy: &Policy,
    publish: &PublishPolicy,
) -> Result<()> {
    let slices = resource_slices(node, &gpus.gpus()?, policy, publish, 0);
    for s in &slices {
        let bad = validate::resource_slice(s);
        if !bad.is_empty() {
            bail!("computed ResourceSlice is invalid: {bad:?}");
        }
    }
    println!("{}", serde_json::to_string_pretty(&slices)?);
    Ok(())
}

/// What the claims' CDI specs point at: the driver and device roots, the installed
/// interposer, hook and preload file, the state directory and the configuration.
fn cdi_options(cli: &Cli, settings: &Settings) -> gpuslice_cdi::Options {
    let interposer = absolute(&settings.interposer);
    gpuslice_cdi::Options {
        driver_root: cli.driver_root.clone(),
        dev_root: cli.dev_root.clone(),
        preload_file: interposer
            .parent()
            .unwrap_or(Path::new("/usr/lib/gpuslice"))
            .join("ld.so.preload"),
        interposer,
        hook: absolute(&settings.hook),
        state_dir: settings.state_dir.clone(),
        config: settings.config_path.as_deref().map(absolute),
    }
}

/// Serves the DRA and registration sockets and, with an API server, publishes the pool and
/// watches the node's slices, until a signal or a socket that cannot be bound.
async fn run_dra(
    sockets: Sockets,
    driver: Driver,
    publisher: Option<Publisher>,
    watch_client: Option<kube::Client>,
    poll: Duration,
    resync: Duration,
) -> Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let stop_on_exit = stop_tx.clone();
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    // Woken when the node's slices are deleted or changed at the API server (a starting
    // kubelet deletes them) and at each registration: republished within seconds.
    let wake = Arc::new(tokio::sync::Notify::new());
    // The pool is published alongside the sockets: kubelet may prepare claims allocated
    // from an earlier publication while this one is being written.
    let publishing = async {
        match (&publisher, watch_client) {
            (Some(p), Some(c)) => {
                let selector = p.field_selector();
                tokio::join!(
                    p.run(poll, resync, &wake, stopped(stop_rx.clone())),
                    slicewatch::watch(c, &selector, &wake, stopped(stop_rx.clone())),
                );
            }
            _ => tracing::info!("--claims-from: no ResourceSlices are published"),
        }
    };
    let serving = async {
        let r = serve(&sockets, Arc::new(driver), wake.clone(), async move {
            gpuslice_kubelet_plugin::socket::stop_signal().await;
            let _ = stop_tx.send(true);
        })
        .await;
        // Serving ended (a signal, or a socket that could not be bound): so does publishing.
        let _ = stop_on_exit.send(true);
        r
    };
    let (served, ()) = tokio::join!(serving, publishing);
    served
}
