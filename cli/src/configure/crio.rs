//! `gpuslice configure crio`: CRI-O's `[crio.runtime.runtimes.gpuslice]` in a drop-in under
//! `/etc/crio/crio.conf.d/` (CRI-O reads every file there after `crio.conf`), with
//! `runtime_path` = `gpuslice-runtime`, `runtime_type = "oci"` and the `gpuslice.io/*`
//! annotations allowed; optionally `default_runtime = "gpuslice"`.

use std::path::PathBuf;

use super::tomlx::{self, ensure_in_array, set_str, table_at};
use super::{read_optional, ConfigureError, FileChange};

/// The default drop-in.
pub const DEFAULT_DROP_IN: &str = "/etc/crio/crio.conf.d/99-gpuslice.conf";
/// The first lines of a drop-in written from nothing.
pub const HEADER: &str = "# Written by `gpuslice configure crio`: the gpuslice runtime handler.\n";

/// What to configure.
#[derive(Debug, Clone)]
pub struct Options {
    /// The drop-in file.
    pub config: PathBuf,
    /// Path of `gpuslice-runtime`.
    pub runtime_path: PathBuf,
    /// `[crio.runtime] default_runtime = "gpuslice"`.
    pub default_runtime: bool,
}

/// The file to write.
pub fn plan(opts: &Options) -> Result<Vec<FileChange>, ConfigureError> {
    let path = &opts.config;
    let old = read_optional(path)?;
    let text = old.clone().unwrap_or_default();
    let mut doc = tomlx::parse(path, &text)?;
    let runtime = table_at(doc.as_table_mut(), &["crio", "runtime"], path)?;
    if opts.default_runtime {
        set_str(runtime, "default_runtime", "gpuslice");
    }
    let class = table_at(runtime, &["runtimes", "gpuslice"], path)?;
    class.set_implicit(false);
    set_str(
        class,
        "runtime_path",
        &opts.runtime_path.display().to_string(),
    );
    set_str(class, "runtime_type", "oci");
    ensure_in_array(class, "allowed_annotations", &["gpuslice.io/*"]);
    let new = match &old {
        Some(_) => doc.to_string(),
        None => format!("{HEADER}{doc}"),
    };
    Ok(vec![FileChange {
        path: path.clone(),
        old,
        new,
    }])
}
