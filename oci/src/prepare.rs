//! The whole bundle step every entry point runs before the container exists: read the spec,
//! decide ([`crate::select`]), admit with the arbiter, edit, and write `config.json` back.
//!
//! A container that asks for nothing (or a sandbox) is not written at all. On any failure after
//! a fresh admission the slice is released before the error is returned, so a failed create
//! leaves no slice, reservation or directory behind. An arbiter that cannot be reached fails the
//! container unless the configuration says `fail = "open"`: then the container starts with the
//! interposer and its memory request (enforced locally, `docs/interposer.md` standalone mode),
//! without a slice, compute shares or hooks, and a warning.

use std::path::{Path, PathBuf};

use gpuslice_api::{Owner, SliceRequest};

use crate::bundle::{config_path, rootfs, write_atomic};
use crate::devices::{nodes_for, DeviceError};
use crate::edit::{apply, EditError, Plan, CONTAINER_INTERPOSER, PRELOAD_FILE};
use crate::ident::slice_id_for;
use crate::loadable::{check, LoadError};
use crate::preload::{merge, read_image_preload};
use crate::select::{select, SelectError, Selection};
use crate::settings::Settings;
use crate::spec::{SpecDoc, SpecError};
use gpuslice_api::client::{Admission, Client, ClientError};

/// What happened to the bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `config.json` was not touched; the reason, for logs.
    Unchanged(&'static str),
    /// Admitted and edited.
    Sliced {
        /// The slice id.
        slice_id: String,
        /// False when the slice already existed (a failed create must then not release it).
        fresh: bool,
    },
    /// Arbiter unreachable with `fail = "open"`: edited for the standalone interposer only.
    Open,
}

/// Why the container must not start. Messages name the cause.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// `config.json` cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// `config.json` is not a usable spec.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The request is malformed.
    #[error(transparent)]
    Select(#[from] SelectError),
    /// The arbiter could not be reached.
    #[error(transparent)]
    Arbiter(#[from] ClientError),
    /// The arbiter refused the request; `asked` names the keys and values it came from.
    #[error("{asked}: {source}")]
    Refused {
        /// `key="value"` pairs of the request.
        asked: String,
        /// The arbiter's answer.
        #[source]
        source: ClientError,
    },
    /// A file gpuslice needs on the host is missing.
    #[error("{what} {path} not found ({hint})")]
    Missing {
        /// What it is.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// Which setting chooses it.
        hint: &'static str,
    },
    /// Device injection failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// An edit failed.
    #[error(transparent)]
    Edit(#[from] EditError),
    /// The interposer cannot be preloaded in the image: the container would run unenforced.
    #[error("image {image}: the interposer cannot be preloaded, refusing the container: {source}")]
    Unloadable {
        /// The image's name (CRI annotation) or its root filesystem.
        image: String,
        /// Why.
        #[source]
        source: LoadError,
    },
}

/// Annotations that name a container's image (CRI, then the OCI image spec's).
const IMAGE_ANNOTATIONS: [&str; 2] = [
    "io.kubernetes.cri.image-name",
    "org.opencontainers.image.ref.name",
];

/// Refuses an image the interposer cannot load in (`crate::loadable`); an unmounted root
/// filesystem (the shim's Create) is checked later, by [`crate::late_preload`]'s caller.
pub fn check_image(doc: &SpecDoc, bundle: &Path, interposer: &Path) -> Result<(), PrepareError> {
    let Some(root) = doc.root_path() else {
        return Ok(());
    };
    let root = rootfs(bundle, &root);
    check(&root, interposer).map(|_| ()).map_err(|source| {
        let notes = doc.annotations();
        let image = IMAGE_ANNOTATIONS
            .iter()
            .find_map(|k| notes.get(*k))
            .map_or_else(
                || {
                    let shown = std::path::absolute(&root).unwrap_or_else(|_| root.clone());
                    shown.display().to_string()
                },
                |n| format!("\"{n}\""),
            );
        PrepareError::Unloadable { image, source }
    })
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PrepareError + '_ {
    move |source| PrepareError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn arbiter_down(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Unreachable { .. } | ClientError::Protocol { .. }
    )
}

/// [`check_image`] on a bundle whose root filesystem is mounted now (the shim, after runc-v2's
/// Create, before anything runs in the container).
pub fn check_mounted_image(bundle: &Path, settings: &Settings) -> Result<(), PrepareError> {
    let path = config_path(bundle);
    let doc = SpecDoc::parse(&std::fs::read(&path).map_err(io_err(&path))?)?;
    let interposer = interposer_of(settings)?;
    check_image(&doc, bundle, &interposer)
}

/// The interposer's canonical host path; missing is an error naming the setting.
fn interposer_of(settings: &Settings) -> Result<PathBuf, PrepareError> {
    std::fs::canonicalize(&settings.interposer).map_err(|_| PrepareError::Missing {
        what: "interposer",
        path: settings.interposer.clone(),
        hint: "config key `interposer`, default ../lib/gpuslice/libgpuslice.so next to the executable",
    })
}

/// Prepares `bundle` for container `container_id`. Warnings (fail-open, unreadable image preload)
/// are pushed to `warnings`.
pub fn prepare_bundle(
    bundle: &Path,
    container_id: &str,
    settings: &Settings,
    warnings: &mut Vec<String>,
) -> Result<Outcome, PrepareError> {
    let path = config_path(bundle);
    let bytes = std::fs::read(&path).map_err(io_err(&path))?;
    let mut doc = SpecDoc::parse(&bytes)?;
    let (request, asked) = match select(&doc.annotations(), &doc.env())? {
        Selection::Nothing => return Ok(Outcome::Unchanged("nothing asked")),
        Selection::Sandbox => return Ok(Outcome::Unchanged("Kubernetes sandbox")),
        Selection::Slice(r, asked) => (r, asked),
    };
    let interposer = interposer_of(settings)?;
    let hook = std::fs::canonicalize(&settings.hook).map_err(|_| PrepareError::Missing {
        what: "hook",
        path: settings.hook.clone(),
        hint: "config key `runtime.hook`, default gpuslice-hook next to the executable",
    })?;
    // Before admission: a refused image leaves no slice behind.
    check_image(&doc, bundle, &interposer)?;
    let slice_id = slice_id_for(container_id);
    let owner = Owner {
        container_id: Some(container_id.to_string()),
        pid: None,
        cgroup: None,
        pod: gpuslice_api::PodRef::from_annotations(&doc.annotations()),
    };
    let admitted = Client::connect(&settings.state_dir, settings.timeout)
        .and_then(|mut c| c.admit(&slice_id, request.clone(), owner));
    let adm = match admitted {
        Ok(a) => a,
        Err(e) if arbiter_down(&e) && settings.fail_open() => {
            warnings.push(format!(
                "{e}; fail = \"open\": starting without a slice (no compute shares; the memory \
                 cap, if any, is enforced by the interposer alone)"
            ));
            let plan = open_plan(interposer, &request);
            apply(&mut doc, &plan)?;
            let out = doc.to_bytes()?;
            write_atomic(&path, &out).map_err(io_err(&path))?;
            return Ok(Outcome::Open);
        }
        Err(e @ ClientError::Arbiter { .. }) => {
            return Err(PrepareError::Refused { asked, source: e })
        }
        Err(e) => return Err(e.into()),
    };
    let fresh = !adm.existing;
    let result = edit_admitted(
        bundle, &path, &mut doc, settings, interposer, hook, &slice_id, &adm, warnings,
    );
    match result {
        Ok(()) => Ok(Outcome::Sliced { slice_id, fresh }),
        Err(e) => {
            if fresh {
                release(settings, &slice_id, warnings);
            }
            Err(e)
        }
    }
}

/// Releases `slice_id`, reporting a failure as a warning.
pub fn release(settings: &Settings, slice_id: &str, warnings: &mut Vec<String>) {
    let r = Client::connect(&settings.state_dir, settings.timeout)
        .and_then(|mut c| c.release(slice_id));
    if let Err(e) = r {
        warnings.push(format!("releasing slice \"{slice_id}\": {e}"));
    }
}

fn open_plan(interposer: PathBuf, request: &SliceRequest) -> Plan {
    let mut extra_env = Vec::new();
    if let Some(m) = &request.memory {
        extra_env.push(("GPUSLICE_MEMORY".to_string(), m.to_string()));
    }
    Plan {
        interposer,
        extra_env,
        ..Plan::default()
    }
}

#[allow(clippy::too_many_arguments)]
fn edit_admitted(
    bundle: &Path,
    path: &Path,
    doc: &mut SpecDoc,
    settings: &Settings,
    interposer: PathBuf,
    hook: PathBuf,
    slice_id: &str,
    adm: &Admission,
    warnings: &mut Vec<String>,
) -> Result<(), PrepareError> {
    let device_nodes = if settings.config.runtime.inject_devices {
        let idx: Vec<u32> = adm.devices.iter().map(|d| d.index).collect();
        nodes_for(&settings.dev_root, &idx)?
    } else {
        Vec::new()
    };
    let image = match doc.root_path() {
        Some(root) => match read_image_preload(&rootfs(bundle, &root)) {
            Ok(t) => t,
            Err(e) => {
                warnings.push(e.to_string());
                None
            }
        },
        None => None,
    };
    let preload = adm.slice_dir.join(PRELOAD_FILE);
    write_atomic_new(
        &preload,
        merge(image.as_deref(), CONTAINER_INTERPOSER).as_bytes(),
    )
    .map_err(io_err(&preload))?;
    let mut tail = vec![
        "--state-dir".to_string(),
        settings.state_dir.display().to_string(),
    ];
    if let Some(c) = &settings.config_path {
        tail.extend(["--config".to_string(), c.display().to_string()]);
    }
    tail.extend(["--slice-id".to_string(), slice_id.to_string()]);
    let plan = Plan {
        interposer,
        slice_dir: Some(adm.slice_dir.clone()),
        preload_file: Some(preload),
        devices: adm.devices.clone(),
        device_nodes,
        hook: settings.lifecycle_hooks.then_some((hook, tail)),
        extra_env: Vec::new(),
    };
    apply(doc, &plan)?;
    let out = doc.to_bytes()?;
    write_atomic(path, &out).map_err(io_err(path))
}

/// Writes a new file (mode 0644) atomically: temporary file, then rename. No `fsync`: the file
/// lives in the slice directory (under `/run`) and is rewritten at every admission.
fn write_atomic_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("gpuslice-{}", std::process::id()));
    let r = (|| {
        let mut f = std::fs::File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(bytes)?;
        std::fs::rename(&tmp, path)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}
