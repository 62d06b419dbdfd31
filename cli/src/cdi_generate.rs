//! `gpuslice cdi generate`: options → [`gpuslice_cdi::generate`]. NVML is loaded from
//! `GPUSLICE_NVML_LIBRARY`, else the config's `nvml_library`, else the system's (as the
//! arbiter does). Reference: `docs/cdi.md`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use gpuslice_api::Config;
use gpuslice_cdi::{Format, Options};

use gpuslice_cli::args::CdiGenerateArgs;

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Runs `cdi generate`; returns the exit status.
pub fn run(
    args: &CdiGenerateArgs,
    config: &Config,
    config_path: Option<&Path>,
    state_dir: &Path,
) -> Result<i32> {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/usr/bin/gpuslice"));
    let bin = exe.parent().unwrap_or(Path::new("/usr/bin")).to_path_buf();
    let interposer = absolute(
        &config
            .interposer
            .clone()
            .unwrap_or_else(|| bin.join("../lib/gpuslice/libgpuslice.so")),
    );
    let hook = absolute(
        &config
            .runtime
            .hook
            .clone()
            .unwrap_or_else(|| bin.join("gpuslice-hook")),
    );
    let preload_file = args.preload_file.clone().unwrap_or_else(|| {
        interposer
            .parent()
            .unwrap_or(Path::new("/usr/lib/gpuslice"))
            .join("ld.so.preload")
    });
    let format = match args.format.as_str() {
        "yaml" => Format::Yaml,
        "json" => Format::Json,
        other => {
            eprintln!("gpuslice cdi generate: --format {other}: use yaml or json");
            return Ok(2);
        }
    };
    let nvml = std::env::var_os("GPUSLICE_NVML_LIBRARY")
        .map(PathBuf::from)
        .or_else(|| config.nvml_library.clone());
    let opts = Options {
        driver_root: args.driver_root.clone(),
        dev_root: args.dev_root.clone(),
        interposer,
        preload_file,
        hook,
        state_dir: state_dir.to_path_buf(),
        config: config_path.map(absolute),
    };
    let gpus = gpuslice_cdi::discover::gpus_from_nvml(nvml.as_deref())?;
    let text = gpuslice_cdi::generate(&opts, &gpus, format, &args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    let devices = text.matches("name:").count() + text.matches("\"name\":").count();
    eprintln!(
        "gpuslice cdi generate: wrote {} ({} GPUs, {devices} devices: by index, by UUID and all)",
        args.output.display(),
        gpus.len()
    );
    Ok(0)
}
