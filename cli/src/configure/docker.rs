//! `gpuslice configure docker`: `runtimes.gpuslice` in Docker's `daemon.json`, with `path`
//! (`gpuslice-runtime`) or `runtimeType` (the gpuslice shim); optionally `default-runtime` and
//! `features.cdi`. Every other key keeps its value and its place; a file that needs no change
//! is not rewritten at all (not even reformatted).

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::containerd::SHIM_TYPE;
use super::{read_optional, ConfigureError, FileChange};

/// A JSON value whose objects keep their key order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number, as written.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, in file order.
    Object(IndexMap<String, Json>),
}

impl Json {
    fn str(s: &str) -> Self {
        Json::String(s.to_string())
    }
}

/// How Docker runs gpuslice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// `"path": "<gpuslice-runtime>"` (runc-compatible wrapper).
    #[default]
    Path,
    /// `"runtimeType": "io.containerd.gpuslice.v2"` (Docker 23+).
    RuntimeType,
}

/// What to configure.
#[derive(Debug, Clone)]
pub struct Options {
    /// `daemon.json`.
    pub config: PathBuf,
    /// The style.
    pub style: Style,
    /// Path of `gpuslice-runtime`.
    pub runtime_path: PathBuf,
    /// `"default-runtime": "gpuslice"`.
    pub default_runtime: bool,
    /// `"features": {"cdi": true}` (Docker 25+).
    pub enable_cdi: bool,
}

/// The file to write.
pub fn plan(opts: &Options) -> Result<Vec<FileChange>, ConfigureError> {
    let path = &opts.config;
    let old = read_optional(path)?;
    let text = old.clone().unwrap_or_default();
    let mut root = if text.trim().is_empty() {
        IndexMap::new()
    } else {
        match parse(path, &text)? {
            Json::Object(m) => m,
            _ => {
                return Err(ConfigureError::Unsupported {
                    path: path.clone(),
                    message: "the top level is not a JSON object".into(),
                })
            }
        }
    };
    let changed = edit(&mut root, opts, path)?;
    let new = if changed || old.is_none() {
        render(&Json::Object(root), &text)
    } else {
        text
    };
    Ok(vec![FileChange {
        path: path.clone(),
        old,
        new,
    }])
}

fn parse(path: &Path, text: &str) -> Result<Json, ConfigureError> {
    serde_json::from_str(text).map_err(|e| {
        // serde_json knows line and column; rebuild the byte offset for the common error type.
        let offset: usize = text
            .split_inclusive('\n')
            .take(e.line().saturating_sub(1))
            .map(str::len)
            .sum::<usize>()
            + e.column().saturating_sub(1);
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        ConfigureError::parse_at(path, text, offset, &msg)
    })
}

fn object<'a>(
    m: &'a mut IndexMap<String, Json>,
    key: &str,
    path: &Path,
) -> Result<&'a mut IndexMap<String, Json>, ConfigureError> {
    let v = m
        .entry(key.to_string())
        .or_insert_with(|| Json::Object(IndexMap::new()));
    match v {
        Json::Object(o) => Ok(o),
        _ => Err(ConfigureError::Unsupported {
            path: path.to_path_buf(),
            message: format!("`{key}` is not a JSON object"),
        }),
    }
}

/// Sets `key`, reporting whether it changed.
fn set(m: &mut IndexMap<String, Json>, key: &str, v: Json) -> bool {
    if m.get(key) == Some(&v) {
        return false;
    }
    m.insert(key.to_string(), v);
    true
}

fn edit(
    root: &mut IndexMap<String, Json>,
    opts: &Options,
    path: &Path,
) -> Result<bool, ConfigureError> {
    let mut changed = false;
    let had_runtimes = root.contains_key("runtimes");
    let runtimes = object(root, "runtimes", path)?;
    let had_class = runtimes.contains_key("gpuslice");
    let class = object(runtimes, "gpuslice", path)?;
    changed |= !had_runtimes || !had_class;
    match opts.style {
        Style::Path => {
            changed |= class.shift_remove("runtimeType").is_some();
            changed |= set(
                class,
                "path",
                Json::str(&opts.runtime_path.display().to_string()),
            );
        }
        Style::RuntimeType => {
            // Docker refuses `path` or `runtimeArgs` beside `runtimeType`.
            changed |= class.shift_remove("path").is_some();
            changed |= class.shift_remove("runtimeArgs").is_some();
            changed |= set(class, "runtimeType", Json::str(SHIM_TYPE));
        }
    }
    if opts.default_runtime {
        changed |= set(root, "default-runtime", Json::str("gpuslice"));
    }
    if opts.enable_cdi {
        let had = root.contains_key("features");
        let features = object(root, "features", path)?;
        changed |= !had;
        changed |= set(features, "cdi", Json::Bool(true));
    }
    Ok(changed)
}

/// Pretty JSON with the file's own indentation (default four spaces) and a final newline.
fn render(v: &Json, original: &str) -> String {
    let indent = original
        .lines()
        .find_map(|l| {
            let t = l.trim_start();
            (t.len() < l.len() && !t.is_empty()).then(|| l[..l.len() - t.len()].to_string())
        })
        .unwrap_or_else(|| "    ".to_string());
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    if v.serialize(&mut ser).is_err() {
        return String::new();
    }
    let mut s = String::from_utf8_lossy(&buf).into_owned();
    s.push('\n');
    s
}
