//! `gpuslice configure containerd|docker|crio`: edits an engine's configuration so that it has a
//! `gpuslice` runtime. Each engine module computes the new text of every file it owns
//! ([`FileChange`]); this module owns what is common: refusing a file it cannot parse, the
//! unified diff of `--dry-run`, the backup written only when something changes, and the atomic
//! write. Reference: `docs/configure.md`.

pub mod containerd;
pub mod crio;
pub mod ctd_config;
pub mod ctd_imports;
pub mod ctd_remove;
pub mod docker;
pub(crate) mod tomlx;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Why a configuration could not be produced or written.
#[derive(Debug, thiserror::Error)]
pub enum ConfigureError {
    /// The existing file is not valid TOML / JSON: it is left untouched.
    #[error("cannot parse {path}: line {line}, column {column}: {message}; the file was left untouched (fix it, or move it away to start from an empty configuration)")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// The file parses but has a shape this command does not edit.
    #[error("{path}: {message}; the file was left untouched")]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl ConfigureError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A parse error at byte `offset` of `text`.
    pub(crate) fn parse_at(path: &Path, text: &str, offset: usize, message: &str) -> Self {
        let (line, column) = line_col(text, offset);
        Self::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message: message.trim().to_string(),
        }
    }
}

/// 1-based line and column of byte `offset` in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map_or(1, |l| l.chars().count() + 1);
    (line, column)
}

/// One file's text before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// The file.
    pub path: PathBuf,
    /// Its text now (`None`: it does not exist).
    pub old: Option<String>,
    /// The text it must have.
    pub new: String,
}

impl FileChange {
    /// Whether writing would change anything.
    pub fn changes(&self) -> bool {
        self.old.as_deref() != Some(self.new.as_str())
    }

    /// The unified diff (`--- path` / `+++ path`), empty when nothing changes.
    pub fn diff(&self) -> String {
        if !self.changes() {
            return String::new();
        }
        let old = self.old.as_deref().unwrap_or("");
        let name = self.path.display().to_string();
        let from = if self.old.is_some() {
            name.clone()
        } else {
            "/dev/null".to_string()
        };
        similar::TextDiff::from_lines(old, &self.new)
            .unified_diff()
            .context_radius(3)
            .header(&from, &name)
            .to_string()
    }
}

/// Reads `path`; a missing file is `None`.
pub fn read_optional(path: &Path) -> Result<Option<String>, ConfigureError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ConfigureError::io(path, e)),
    }
}

/// What [`apply`] did to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Already as wanted; not touched.
    Unchanged(PathBuf),
    /// Written; the previous text saved at `backup` (none for a new file).
    Written {
        /// The file.
        path: PathBuf,
        /// The backup, when the file existed.
        backup: Option<PathBuf>,
    },
    /// `--dry-run`: would be written.
    WouldWrite(PathBuf),
}

/// Writes every change (or, with `dry_run`, prints its diff to `out`), and reports each file.
pub fn apply(
    changes: &[FileChange],
    dry_run: bool,
    out: &mut dyn std::io::Write,
) -> Result<Vec<Applied>, ConfigureError> {
    let stamp = timestamp(SystemTime::now());
    let mut done = Vec::new();
    for c in changes {
        if !c.changes() {
            done.push(Applied::Unchanged(c.path.clone()));
            continue;
        }
        if dry_run {
            out.write_all(c.diff().as_bytes())
                .map_err(|e| ConfigureError::io(Path::new("<stdout>"), e))?;
            done.push(Applied::WouldWrite(c.path.clone()));
            continue;
        }
        let backup = match &c.old {
            Some(old) => {
                let b = backup_path(&c.path, &stamp);
                write_atomic(&b, old, None)?;
                Some(b)
            }
            None => None,
        };
        write_atomic(&c.path, &c.new, Some(&c.path))?;
        done.push(Applied::Written {
            path: c.path.clone(),
            backup,
        });
    }
    Ok(done)
}

/// A human summary of [`apply`]'s result, one line per file.
pub fn summary(engine: &str, applied: &[Applied]) -> String {
    let mut s = String::new();
    if applied.iter().all(|a| matches!(a, Applied::Unchanged(_))) {
        let _ = writeln!(
            s,
            "{engine}: already configured for gpuslice; nothing changed"
        );
    }
    for a in applied {
        let _ = match a {
            Applied::Unchanged(p) => writeln!(s, "  unchanged: {}", p.display()),
            Applied::Written {
                path,
                backup: Some(b),
            } => writeln!(s, "  updated: {} (backup: {})", path.display(), b.display()),
            Applied::Written { path, backup: None } => {
                writeln!(s, "  created: {}", path.display())
            }
            Applied::WouldWrite(p) => writeln!(s, "  would change: {} (dry run)", p.display()),
        };
    }
    if applied.iter().any(|a| matches!(a, Applied::Written { .. })) {
        let _ = writeln!(s, "restart {engine} for the change to take effect");
    }
    s
}

/// `<file>.gpuslice-backup-<stamp>`, with a counter if that exists already.
fn backup_path(path: &Path, stamp: &str) -> PathBuf {
    let base = format!("{}.gpuslice-backup-{stamp}", path.display());
    let mut p = PathBuf::from(&base);
    let mut n = 1;
    while p.exists() {
        p = PathBuf::from(format!("{base}.{n}"));
        n += 1;
    }
    p
}

/// UTC `YYYYMMDDTHHMMSSZ`.
pub fn timestamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Writes `text` to `path` through a temporary file in the same directory and a rename;
/// creates missing parent directories; keeps the mode of `like` when it exists.
fn write_atomic(path: &Path, text: &str, like: Option<&Path>) -> Result<(), ConfigureError> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| ConfigureError::io(dir, e))?;
    let name = path
        .file_name()
        .map_or_else(|| "config".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.gpuslice-tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        let mode = like
            .and_then(|l| std::fs::metadata(l).ok())
            .map_or(0o644, |m| m.permissions().mode() & 0o7777);
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(ConfigureError::io(path, e));
    }
    Ok(())
}

/// Where the gpuslice binaries are: next to the running `gpuslice` (the installed layout
/// `…/bin/`), so `target/dist/usr/bin/gpuslice` configures `target/dist/usr/bin/…`.
pub fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from("/usr/bin").join(name))
}

/// The containerd editor's options from the command line.
fn containerd_options(
    a: &crate::configure_args::ContainerdArgs,
    runtime_path: PathBuf,
) -> containerd::Options {
    use crate::configure_args::ContainerdStyle;
    containerd::Options {
        config: a.file.clone(),
        drop_in: a.drop_in.clone(),
        in_place: a.in_place,
        style: match a.style {
            ContainerdStyle::BinaryName => containerd::Style::BinaryName,
            ContainerdStyle::Shim => containerd::Style::Shim,
        },
        runtime_path,
        default_runtime: a.common.default_runtime,
        enable_cdi: a.enable_cdi,
        new_version: a.new_version,
        series: match a.containerd_major {
            Some(0) => None,
            Some(n) => Some(n),
            None => ctd_imports::detect_series(),
        },
    }
}

/// `gpuslice configure containerd --remove`: rewrites the main file without gpuslice's
/// entries (no backup: what is undone is gpuslice's own) and deletes the drop-in.
fn remove_containerd(a: &crate::configure_args::ContainerdArgs) -> i32 {
    let opts = containerd_options(a, PathBuf::new());
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("gpuslice configure containerd --remove: {e}");
        1
    };
    let removal = match ctd_remove::plan_remove(&opts) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let mut stdout = std::io::stdout();
    if a.common.dry_run {
        for c in &removal.changes {
            let _ = stdout.write_all(c.diff().as_bytes());
        }
        for p in &removal.delete {
            println!("would delete {}", p.display());
        }
        return 0;
    }
    let mut changed = false;
    for c in removal.changes.iter().filter(|c| c.changes()) {
        if let Err(e) = write_atomic(&c.path, &c.new, Some(&c.path)) {
            return fail(&e);
        }
        println!("  updated: {}", c.path.display());
        changed = true;
    }
    for p in &removal.delete {
        if let Err(e) = std::fs::remove_file(p) {
            return fail(&ConfigureError::io(p, e));
        }
        println!("  deleted: {}", p.display());
        changed = true;
    }
    if changed {
        println!("restart containerd for the change to take effect");
    } else {
        println!("containerd: no gpuslice configuration found; nothing changed");
    }
    0
}

/// `gpuslice configure <engine>`: plans, applies (or prints the diff) and reports; the exit
/// status (0 done or nothing to do, 1 refused or failed).
pub fn run(cmd: &crate::configure_args::ConfigureCommand) -> i32 {
    use crate::configure_args::{ConfigureCommand as C, DockerStyle};
    let runtime = |c: &crate::configure_args::CommonArgs| {
        c.runtime_path
            .clone()
            .unwrap_or_else(|| sibling_binary("gpuslice-runtime"))
    };
    let (engine, common, planned) = match cmd {
        C::Containerd(a) if a.remove => return remove_containerd(a),
        C::Containerd(a) => (
            "containerd",
            &a.common,
            containerd::plan(&containerd_options(a, runtime(&a.common))),
        ),
        C::Docker(a) => (
            "docker",
            &a.common,
            docker::plan(&docker::Options {
                config: a.file.clone(),
                style: match a.style {
                    DockerStyle::Path => docker::Style::Path,
                    DockerStyle::RuntimeType => docker::Style::RuntimeType,
                },
                runtime_path: runtime(&a.common),
                default_runtime: a.common.default_runtime,
                enable_cdi: a.enable_cdi,
            }),
        ),
        C::Crio(a) => (
            "crio",
            &a.common,
            crio::plan(&crio::Options {
                config: a.file.clone(),
                runtime_path: runtime(&a.common),
                default_runtime: a.common.default_runtime,
            }),
        ),
    };
    let changes = match planned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpuslice configure {engine}: {e}");
            return 1;
        }
    };
    let mut stdout = std::io::stdout();
    match apply(&changes, common.dry_run, &mut stdout) {
        Ok(done) => {
            let s = summary(engine, &done);
            if common.dry_run {
                eprint!("{s}");
            } else {
                print!("{s}");
            }
            0
        }
        Err(e) => {
            eprintln!("gpuslice configure {engine}: {e}");
            1
        }
    }
}
