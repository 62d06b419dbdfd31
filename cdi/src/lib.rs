//! CDI spec generation for kind `gpuslice.io/gpu` (`gpuslice cdi generate`): discovers the
//! GPUs (NVML), their device nodes (under a dev root), the driver's libraries (loader cache
//! under a driver root) and binaries, and builds a spec whose edits add them together with the
//! interposer, the preload file and the `gpuslice-hook` hooks (standalone mode). The spec gets
//! the lowest sufficient `cdiVersion`, is validated with the `container-device-interface`
//! crate and written atomically. Reference: `docs/cdi.md`.

pub mod container;
pub mod discover;
pub mod driver_root;
pub mod ldcache;
pub mod spec;

use std::path::{Path, PathBuf};

pub use discover::Gpu;
pub use spec::{Format, Spec, KIND};

/// Default output path (the design brief's contract).
pub const DEFAULT_OUTPUT: &str = "/var/run/cdi/gpuslice.yaml";
/// The interposer's path inside containers (and, by default, on the host).
pub use gpuslice_region::layout::CONTAINER_INTERPOSER;

/// Errors of generation; each names the file or call at fault.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    #[error("NVML: {0}")]
    Nvml(String),
    #[error("{0}")]
    Missing(String),
    #[error("invalid CDI spec: {0}")]
    Invalid(String),
    #[error("{0}")]
    Io(String),
}

/// Inputs of [`build`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Root the driver's files are found under (`/` on a node; a fake root in tests).
    pub driver_root: PathBuf,
    /// Directory holding the device nodes (`/dev`).
    pub dev_root: PathBuf,
    /// The interposer on the host.
    pub interposer: PathBuf,
    /// The file bound at `/etc/ld.so.preload` (one line: the interposer's container path).
    pub preload_file: PathBuf,
    /// `gpuslice-hook` on the host.
    pub hook: PathBuf,
    /// State directory given to the hook (`--state-dir`).
    pub state_dir: PathBuf,
    /// Configuration file given to the hook (`--config`), if not the default.
    pub config: Option<PathBuf>,
}

fn ro_bind(host: &Path, container: &str) -> spec::Mount {
    spec::Mount {
        host_path: host.display().to_string(),
        container_path: container.to_string(),
        options: ["ro", "nosuid", "nodev", "bind"].map(String::from).to_vec(),
    }
}

fn node(n: &discover::Node, dev_root: &Path) -> spec::DeviceNode {
    spec::DeviceNode {
        path: n.path.clone(),
        // hostPath only when the nodes are not at their container path (needs cdiVersion 0.5.0).
        host_path: (dev_root != Path::new("/dev")).then(|| n.host_path.display().to_string()),
        kind: "c".into(),
        major: n.major as i64,
        minor: n.minor as i64,
    }
}

/// The standalone hook of the node's spec: `gpuslice-hook --state-dir … [--config …]
/// --standalone <stage>`.
pub fn hook_call(opts: &Options) -> container::HookCall {
    let mut args = vec![
        "--state-dir".to_string(),
        opts.state_dir.display().to_string(),
    ];
    if let Some(c) = &opts.config {
        args.push("--config".into());
        args.push(c.display().to_string());
    }
    args.push("--standalone".into());
    container::HookCall {
        path: opts.hook.clone(),
        args,
    }
}

/// The hook's arguments for `stage` (`create-runtime` or `poststop`), `argv[0]` included.
pub fn hook_args(opts: &Options, stage: &str) -> Vec<String> {
    hook_call(opts).argv(stage)
}

/// The preload file's content.
pub fn preload_content() -> String {
    format!("{CONTAINER_INTERPOSER}\n")
}

/// Builds the spec for `gpus` (validated, lowest version). Every GPU is a device by index, by
/// UUID, and all of them together as `all`.
pub fn build(opts: &Options, gpus: &[Gpu]) -> Result<Spec, CdiError> {
    if gpus.is_empty() {
        return Err(CdiError::Missing("NVML reports no GPUs".into()));
    }
    for (what, p) in [
        ("interposer", &opts.interposer),
        ("gpuslice-hook", &opts.hook),
    ] {
        if !p.is_file() {
            return Err(CdiError::Missing(format!(
                "{what} {} not found",
                p.display()
            )));
        }
    }
    let mut common = spec::Edits::default();
    for n in discover::control_nodes(&opts.dev_root)? {
        common.device_nodes.push(node(&n, &opts.dev_root));
    }
    for f in discover::driver_libraries(&opts.driver_root)?
        .iter()
        .chain(discover::driver_binaries(&opts.driver_root).iter())
    {
        common.mounts.push(ro_bind(&f.host_path, &f.path));
    }
    // The interposer, the preload file and the standalone hooks: the same description the
    // runtime writes as OCI edits.
    let slice = container::SliceContainer::of(&container::SliceGrant {
        interposer: Some(opts.interposer.clone()),
        preload_file: Some(opts.preload_file.clone()),
        hook: Some(hook_call(opts)),
        ..container::SliceGrant::default()
    })
    .cdi_edits();
    common.mounts.extend(slice.mounts);
    common.hooks.extend(slice.hooks);
    let mut devices = Vec::new();
    let mut all = spec::Edits::default();
    for g in gpus {
        let n = discover::gpu_node(&opts.dev_root, g)?;
        let edits = spec::Edits {
            env: vec![format!("GPUSLICE_CDI_GPU_{}={}", g.index, g.uuid)],
            device_nodes: vec![node(&n, &opts.dev_root)],
            ..Default::default()
        };
        all.env.extend(edits.env.iter().cloned());
        all.device_nodes.extend(edits.device_nodes.iter().cloned());
        for name in [g.index.to_string(), g.uuid.clone()] {
            devices.push(spec::Device {
                name,
                container_edits: edits.clone(),
            });
        }
    }
    devices.push(spec::Device {
        name: "all".into(),
        container_edits: all,
    });
    let mut s = Spec {
        cdi_version: String::new(),
        kind: KIND.into(),
        devices,
        container_edits: common,
    };
    s.set_lowest_version()?;
    Ok(s)
}

/// Builds, renders, validates (as it will be named at `output`) and writes the spec
/// atomically; also writes the preload file when it is missing or differs. Returns the text.
pub fn generate(
    opts: &Options,
    gpus: &[Gpu],
    format: Format,
    output: &Path,
) -> Result<String, CdiError> {
    let s = build(opts, gpus)?;
    let text = s.render(format)?;
    // Validate as the engines will read it: under a name with the format's extension.
    let check = output.with_extension(format.extension());
    s.validate(&check)?;
    if std::fs::read_to_string(&opts.preload_file).ok() != Some(preload_content()) {
        spec::write_atomic(&opts.preload_file, &preload_content())?;
    }
    spec::write_atomic(output, &text)?;
    Ok(text)
}
