//! What containerd loads besides its main file: the `imports` chain in containerd's own order,
//! and the CRI plugin table that results under each series' merge rule. The gpuslice drop-in is
//! written from this, so that a drop-in of another tool (NVIDIA's container toolkit writes
//! `conf.d/99-nvidia.toml` with its `nvidia` class) survives beside ours:
//!
//! - containerd 1.x ([`Merge::Replace`]): each imported file's plugin table *replaces* the table
//!   loaded so far (`mergeConfig`: maps merged by key, values replaced whole; checked with
//!   `containerd config dump` of 1.6 and 1.7). The last file that names the CRI table wins, so
//!   ours must be that file and must carry the table as containerd has it just before us —
//!   from the main file *and* every import loaded earlier (NVIDIA's included).
//! - containerd 2.x ([`Merge::Deep`]): imported plugin tables are merged key by key (2.1's dump
//!   shows both classes from two partial drop-ins), so ours carries only what gpuslice adds.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table};

use super::ctd_config::{cri_keys, glob_match, version_of};
use super::{read_optional, tomlx, ConfigureError};

/// How an imported file's plugin table combines with what was loaded before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// containerd 1.x: the imported table replaces the earlier one whole.
    Replace,
    /// containerd 2.x: tables are merged key by key.
    Deep,
}

impl Merge {
    /// The rule for a main config of `version` on a containerd of major `series` (`None`:
    /// unknown). A version 3 file only loads on 2.x; a version 2 file on an unknown series gets
    /// the 1.x rule, whose full-table drop-in 2.x also loads correctly (it merges it key by key).
    pub fn for_config(version: i64, series: Option<u32>) -> Self {
        match (version, series) {
            (3.., _) | (_, Some(2..)) => Merge::Deep,
            _ => Merge::Replace,
        }
    }
}

/// One file containerd loads, in load order, with its parsed text.
pub struct Loaded {
    /// The file.
    pub path: PathBuf,
    /// Its parsed text (`None`: gpuslice's own drop-in, whose old text is not an input).
    pub doc: Option<DocumentMut>,
}

/// containerd's load order: the main file, then breadth first each file's `imports` (relative
/// entries against the importing file's directory; an entry with `*` expanded in sorted order;
/// a file already loaded skipped). `ours` is listed where it falls, even before it exists, and
/// is not read; other listed files that do not exist are skipped (containerd refuses them).
pub fn load_order(
    main: &Path,
    main_doc: &DocumentMut,
    ours: &Path,
) -> Result<Vec<Loaded>, ConfigureError> {
    let mut seen: HashSet<PathBuf> = HashSet::from([main.to_path_buf()]);
    let mut out = vec![Loaded {
        path: main.to_path_buf(),
        doc: Some(main_doc.clone()),
    }];
    let mut pending = resolve(main, main_doc, ours)?;
    let mut i = 0;
    while i < pending.len() {
        let path = pending[i].clone();
        i += 1;
        if !seen.insert(path.clone()) {
            continue;
        }
        if path == ours {
            out.push(Loaded { path, doc: None });
            continue;
        }
        let Some(text) = read_optional(&path)? else {
            continue;
        };
        let doc = tomlx::parse(&path, &text)?;
        pending.extend(resolve(&path, &doc, ours)?);
        out.push(Loaded {
            path,
            doc: Some(doc),
        });
    }
    Ok(out)
}

/// The files one file's `imports` names, in order.
fn resolve(file: &Path, doc: &DocumentMut, ours: &Path) -> Result<Vec<PathBuf>, ConfigureError> {
    let Some(item) = doc.get("imports") else {
        return Ok(Vec::new());
    };
    let arr = item.as_array().ok_or_else(|| ConfigureError::Unsupported {
        path: file.to_path_buf(),
        message: "`imports` is not an array of strings".into(),
    })?;
    let base = file.parent().unwrap_or(Path::new("/"));
    let mut out = Vec::new();
    for entry in arr.iter().filter_map(|v| v.as_str()) {
        let full = base.join(entry);
        if !entry.contains('*') {
            out.push(full);
            continue;
        }
        out.extend(expand(file, &full, ours)?);
    }
    Ok(out)
}

/// The files a `*` pattern matches, sorted (`ours` included when it matches, existing or not).
/// A wildcard before the last component is refused: gpuslice does not walk directories.
fn expand(file: &Path, pattern: &Path, ours: &Path) -> Result<Vec<PathBuf>, ConfigureError> {
    let dir = pattern.parent().unwrap_or(Path::new("/"));
    if dir.to_string_lossy().contains('*') {
        return Err(ConfigureError::Unsupported {
            path: file.to_path_buf(),
            message: format!(
                "import {} has a wildcard in a directory name, which gpuslice does not follow",
                pattern.display()
            ),
        });
    }
    let pat = pattern.display().to_string();
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_file() && glob_match(&pat, &p.display().to_string()) {
                found.push(p);
            }
        }
    }
    if glob_match(&pat, &ours.display().to_string()) && !found.iter().any(|p| p == ours) {
        found.push(ours.to_path_buf());
    }
    found.sort();
    Ok(found)
}

/// The CRI plugin table of one file (its own version's key), if it has one.
fn cri_of(doc: &DocumentMut, path: &Path) -> Result<Option<Table>, ConfigureError> {
    let version = version_of(doc, path)?;
    let keys = cri_keys(version).unwrap_or(["plugins", "cri"]);
    Ok(tomlx::get_table(doc.as_table(), &keys).cloned())
}

/// The CRI table containerd has loaded just before `ours`, under `merge`; `None` when no
/// earlier file names one. Under [`Merge::Replace`], a file loaded *after* ours that names the
/// CRI table would replace ours whole: refused, naming that file.
pub fn cri_before_ours(
    order: &[Loaded],
    ours: &Path,
    merge: Merge,
) -> Result<Option<Table>, ConfigureError> {
    let mut acc: Option<Table> = None;
    let mut after_ours = false;
    for f in order {
        let Some(doc) = &f.doc else {
            after_ours = true;
            continue;
        };
        let Some(cri) = cri_of(doc, &f.path)? else {
            continue;
        };
        if after_ours && merge == Merge::Replace {
            return Err(ConfigureError::Unsupported {
                path: ours.to_path_buf(),
                message: format!(
                    "containerd 1.x keeps only the CRI table of the last file it imports, and {} \
                     is imported after this drop-in and has one (the gpuslice class would be \
                     lost); name the drop-in so that it sorts after that file (--drop-in)",
                    f.path.display()
                ),
            });
        }
        if after_ours {
            continue;
        }
        acc = Some(match (acc, merge) {
            (Some(mut base), Merge::Deep) => {
                deep_merge(&mut base, &cri);
                base
            }
            _ => cri,
        });
    }
    Ok(acc)
}

/// `over` merged into `base` key by key (tables recursively; anything else replaced).
fn deep_merge(base: &mut Table, over: &Table) {
    for (k, v) in over.iter() {
        match (base.get_mut(k).and_then(Item::as_table_mut), v.as_table()) {
            (Some(b), Some(o)) => deep_merge(b, o),
            _ => {
                base.insert(k, v.clone());
            }
        }
    }
}

/// The major version of the `containerd` on `PATH` (`containerd --version` prints
/// `containerd <module> v1.7.24 …` or `… 2.1.9+unknown`); `None` when it cannot be run or read.
pub fn detect_series() -> Option<u32> {
    let out = std::process::Command::new("containerd")
        .arg("--version")
        .output()
        .ok()?;
    parse_series(&String::from_utf8_lossy(&out.stdout))
}

/// The major version in `containerd --version`'s output.
pub fn parse_series(text: &str) -> Option<u32> {
    let word = text.split_whitespace().nth(2)?;
    let digits: String = word
        .trim_start_matches('v')
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}
