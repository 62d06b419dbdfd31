//! `gpuslice configure containerd --remove`: undoes what the command added — the drop-in and
//! the `imports` entry naming it (the key itself where that leaves it empty), or, where the
//! class was written into the main file (version 1, `--in-place`), the `gpuslice` class and a
//! `default_runtime_name` naming it. Other classes (NVIDIA's, `runc`) and every other key are
//! left as they are.

use std::path::{Path, PathBuf};

use toml_edit::Item;

use super::ctd_config::{cri_keys, default_drop_in, version_of, Options, CLASS};
use super::{read_optional, tomlx, ConfigureError, FileChange};

/// What removing does: files to rewrite and files to delete.
#[derive(Debug, Default)]
pub struct Removal {
    /// The main file without gpuslice's entries (unchanged when there were none).
    pub changes: Vec<FileChange>,
    /// gpuslice's drop-in, when it exists.
    pub delete: Vec<PathBuf>,
}

/// Plans the removal for `opts` (its `config`, `drop_in` and `in_place`).
pub fn plan_remove(opts: &Options) -> Result<Removal, ConfigureError> {
    let path = &opts.config;
    let mut out = Removal::default();
    let drop_in = std::path::absolute(
        opts.drop_in
            .clone()
            .unwrap_or_else(|| default_drop_in(path)),
    )
    .map_err(|e| ConfigureError::io(path, e))?;
    if read_optional(&drop_in)?.is_some() {
        out.delete.push(drop_in.clone());
    }
    let Some(old) = read_optional(path)? else {
        return Ok(out);
    };
    let mut doc = tomlx::parse(path, &old)?;
    let version = version_of(&doc, path)?;
    remove_import(&mut doc, path, &drop_in);
    let keys = cri_keys(version).unwrap_or(["plugins", "cri"]);
    let containerd = [&keys[..], &["containerd"]].concat();
    if let Some(ctd) = table_mut(doc.as_table_mut(), &containerd) {
        if ctd.get("default_runtime_name").and_then(Item::as_str) == Some(CLASS) {
            ctd.remove("default_runtime_name");
        }
        if let Some(runtimes) = ctd.get_mut("runtimes").and_then(Item::as_table_mut) {
            runtimes.remove(CLASS);
        }
    }
    out.changes.push(FileChange {
        path: path.clone(),
        new: doc.to_string(),
        old: Some(old),
    });
    Ok(out)
}

/// Drops the `imports` entries that name `drop_in` (globs stay: they may name other files);
/// the key goes when nothing is left in it.
pub(crate) fn remove_import(doc: &mut toml_edit::DocumentMut, path: &Path, drop_in: &Path) {
    let base = path.parent().unwrap_or(Path::new("/"));
    let Some(arr) = doc.get_mut("imports").and_then(Item::as_array_mut) else {
        return;
    };
    let before = arr.len();
    arr.retain(|v| v.as_str().is_none_or(|s| base.join(s) != drop_in));
    if arr.is_empty() {
        doc.remove("imports");
    } else if arr.len() != before {
        arr.fmt();
    }
}

fn table_mut<'a>(
    root: &'a mut toml_edit::Table,
    keys: &[&str],
) -> Option<&'a mut toml_edit::Table> {
    let mut t = root;
    for k in keys {
        t = t.get_mut(k)?.as_table_mut()?;
    }
    Some(t)
}
