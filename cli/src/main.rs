//! `gpuslice`: the admin CLI. `run` (a bare process in a slice), `status` (table / JSON /
//! watch), `update` (live resize), `cdi generate` (the node's CDI spec), `configure` (engines)
//! and `doctor` (node check). Reference: `docs/cli.md`.

mod cdi_generate;

use std::path::PathBuf;
use std::process::exit;

use anyhow::{Context, Result};
use clap::Parser;
use gpuslice_api::config::DEFAULT_CONFIG_PATH;
use gpuslice_api::{Config, Request, Response};
use gpuslice_cli::args::{CdiCommand, Cli, Command, StatusArgs, UpdateArgs};
use gpuslice_cli::client::{self, Client};
use gpuslice_cli::configure;
use gpuslice_cli::options;
use gpuslice_cli::run::{self, RunPlan};
use gpuslice_cli::status::StatusView;

/// Usage errors and not-implemented commands.
const EXIT_USAGE: i32 = 2;

fn main() {
    let cli = Cli::parse();
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpuslice: {e:#}");
            1
        }
    };
    exit(code);
}

fn load(cli: &Cli) -> Result<(Config, PathBuf)> {
    let (path, explicit) = match &cli.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
    };
    let config = Config::load(&path, explicit)?;
    let state_dir = cli
        .state_dir
        .clone()
        .unwrap_or_else(|| config.state_dir.clone());
    Ok((config, state_dir))
}

fn dispatch(cli: Cli) -> Result<i32> {
    match &cli.command {
        Command::Cdi {
            command: CdiCommand::Generate(args),
        } => {
            let (config, state_dir) = load(&cli)?;
            return cdi_generate::run(args, &config, cli.config.as_deref(), &state_dir);
        }
        Command::Configure { engine } => return Ok(configure::run(engine)),
        Command::Doctor(args) => {
            if let Some(lib) = &args.dlopen_probe {
                return Ok(gpuslice_cli::doctor::dlopen_probe(lib));
            }
        }
        _ => {}
    }
    let (config, state_dir) = match load(&cli) {
        Ok(v) => v,
        Err(e) if matches!(cli.command, Command::Run(_)) => {
            eprintln!("gpuslice run: {e:#}");
            return Ok(run::EXIT_FAILED);
        }
        Err(e) => return Err(e),
    };
    match cli.command {
        Command::Run(args) => {
            let request = match options::slice_request(&args) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("gpuslice run: {e}");
                    return Ok(EXIT_USAGE);
                }
            };
            Ok(run::run(RunPlan {
                state_dir,
                interposer: run::interposer_path(config.interposer.as_deref()),
                request,
                command: args.command,
            }))
        }
        Command::Status(args) => status(&state_dir, &args),
        Command::Update(args) => update(&state_dir, &args),
        Command::Doctor(args) => doctor(&config, state_dir, &args),
        Command::Cdi { .. } | Command::Configure { .. } => Ok(EXIT_USAGE),
    }
}

fn doctor(
    config: &Config,
    state_dir: PathBuf,
    args: &gpuslice_cli::configure_args::DoctorArgs,
) -> Result<i32> {
    use gpuslice_cli::doctor;
    let inputs = doctor::Inputs {
        state_dir,
        nvml_library: args
            .nvml_library
            .clone()
            .or_else(|| config.nvml_library.clone()),
        interposer: args
            .interposer
            .clone()
            .unwrap_or_else(|| run::interposer_path(config.interposer.as_deref())),
        cdi_spec: args.cdi_spec.clone(),
        containerd_config: args.containerd_config.clone(),
        docker_config: args.docker_config.clone(),
        crio_dir: args.crio_dir.clone(),
        driver_version_file: PathBuf::from("/proc/driver/nvidia/version"),
        probe_exe: std::env::current_exe().ok(),
        containerd_address: args.containerd_address.clone(),
        docker_socket: args.docker_socket.clone(),
        search_path: std::env::var_os("PATH"),
    };
    let checks = doctor::run_checks(&inputs);
    print!("{}", doctor::render(&checks));
    Ok(doctor::exit_code(&checks))
}

fn fetch(state_dir: &std::path::Path) -> Result<StatusView> {
    let mut client = Client::connect(state_dir, client::TIMEOUT)?;
    match client.call(Request::Status {}).context("status")? {
        Response::Status(s) => Ok(StatusView::build(&s, state_dir)),
        other => anyhow::bail!("status: unexpected reply {other:?}"),
    }
}

fn status(state_dir: &std::path::Path, args: &StatusArgs) -> Result<i32> {
    loop {
        let view = fetch(state_dir);
        let text = match (&view, args.json) {
            (Ok(v), true) => v.to_json() + "\n",
            (Ok(v), false) => v.render(),
            (Err(e), _) if !args.watch => return Err(anyhow::anyhow!("{e:#}")),
            (Err(e), _) => format!("gpuslice: {e:#}\n"),
        };
        if !args.watch {
            print!("{text}");
            return Ok(0);
        }
        // Clear the screen and home the cursor, as top does; Ctrl-C ends it.
        print!(
            "\x1b[H\x1b[2Jgpuslice status — every {:?} — {}\n\n{text}",
            args.interval,
            state_dir.display()
        );
        use std::io::Write as _;
        std::io::stdout().flush().context("stdout")?;
        std::thread::sleep(args.interval);
    }
}

fn update(state_dir: &std::path::Path, args: &UpdateArgs) -> Result<i32> {
    // A unique prefix names a slice (the table shows Docker's 64-digit ids as 12).
    let slice = {
        let mut client = Client::connect(state_dir, client::TIMEOUT)?;
        let ids: Vec<String> = match client.call(gpuslice_api::Request::Status {})? {
            Response::Status(s) => s.slices.into_iter().map(|s| s.slice_id).collect(),
            _ => Vec::new(),
        };
        match gpuslice_cli::status::resolve_prefix(&args.slice, &ids) {
            Ok(id) => id.to_string(),
            Err(_) if ids.is_empty() => args.slice.clone(),
            Err(e) => {
                eprintln!("gpuslice update: {e}");
                return Ok(1);
            }
        }
    };
    let request = match options::update_request(&slice, &args.request) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpuslice update: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let mut client = Client::connect(state_dir, client::TIMEOUT)?;
    match client.call(request) {
        Ok(Response::Updated {
            slice_id,
            devices,
            warnings,
        }) => {
            println!("updated slice {slice_id}");
            for d in devices {
                let cap = d
                    .memory_cap
                    .map_or("none".to_string(), gpuslice_cli::status::bytes);
                println!(
                    "  GPU {} {} ({}): memory cap {cap}",
                    d.index, d.name, d.uuid
                );
            }
            for w in warnings {
                eprintln!("warning: {w}");
            }
            Ok(0)
        }
        Err(client::ClientError::Arbiter { message, .. }) => {
            eprintln!("gpuslice update: {message}");
            Ok(1)
        }
        Err(e) => Err(e.into()),
        Ok(other) => anyhow::bail!("update: unexpected reply {other:?}"),
    }
}
