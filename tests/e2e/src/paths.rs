//! Where things are: the workspace, the dist tree (`cargo xtask dist`), the engines.
//!
//! The dist tree is `$GPUSLICE_DIST` if set, else `$CARGO_TARGET_DIR/dist`, else
//! `<workspace>/target/dist`. Engines: the distribution's under `/usr`, newer ones unpacked by
//! `scripts/install-engines.sh` under `$GPUSLICE_E2E_PREFIX` (default `/opt/gpuslice-e2e`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (two levels above this crate).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The dist tree.
pub fn dist() -> PathBuf {
    if let Some(d) = std::env::var_os("GPUSLICE_DIST") {
        return PathBuf::from(d);
    }
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t).join("dist"),
        None => workspace().join("target/dist"),
    }
}

/// `dist/sim`: the simulated `libcuda.so.1` and `libnvidia-ml.so.1`.
pub fn sim_lib_dir() -> PathBuf {
    dist().join("sim")
}

/// The workload client binary.
pub fn workload() -> PathBuf {
    dist().join("sim/bin/gpuslice-workload")
}

/// A product binary under `dist/usr/bin`.
pub fn product(name: &str) -> PathBuf {
    dist().join("usr/bin").join(name)
}

/// The interposer in the dist tree.
pub fn interposer() -> PathBuf {
    dist().join("usr/lib/gpuslice/libgpuslice.so")
}

/// What the suites need from the dist tree and is missing, if anything.
pub fn dist_missing() -> Option<String> {
    let need = [
        workload(),
        sim_lib_dir().join("libcuda.so.1"),
        sim_lib_dir().join("libnvidia-ml.so.1"),
    ];
    missing_of(&need).map(|m| format!("{m} (run `cargo xtask dist`)"))
}

/// Whether the product binaries are present and real (not the placeholders that refuse to run).
pub fn product_missing() -> Option<String> {
    let need = [
        product("gpuslice-runtime"),
        product("gpuslice-arbiter"),
        interposer(),
    ];
    if let Some(m) = missing_of(&need) {
        return Some(format!("{m} (run `cargo xtask dist`)"));
    }
    let rt = product("gpuslice-runtime");
    match Command::new(&rt).arg("--version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "{} --version failed ({}): {}",
            rt.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("{}: {e}", rt.display())),
    }
}

fn missing_of(paths: &[PathBuf]) -> Option<String> {
    let gone: Vec<String> = paths
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    (!gone.is_empty()).then(|| format!("missing {}", gone.join(", ")))
}

/// Root of the private engine prefixes.
pub fn engine_prefix() -> PathBuf {
    std::env::var_os("GPUSLICE_E2E_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/gpuslice-e2e"))
}

/// The distribution's runc (used with every containerd).
pub fn runc() -> PathBuf {
    first_existing(&["/usr/sbin/runc", "/usr/bin/runc"])
}

/// A containerd installation: `containerd`, `ctr` and `containerd-shim-runc-v2` in one `bin` dir.
#[derive(Debug, Clone)]
pub struct ContainerdBins {
    /// Major.minor, e.g. `1.6`.
    pub series: String,
    /// Directory with the binaries.
    pub bin: PathBuf,
}

impl ContainerdBins {
    /// `containerd`.
    pub fn containerd(&self) -> PathBuf {
        self.bin.join("containerd")
    }
    /// `ctr`.
    pub fn ctr(&self) -> PathBuf {
        self.bin.join("ctr")
    }
    /// Major version (1 or 2): selects the configuration template.
    pub fn major(&self) -> u32 {
        self.series
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(1)
    }
}

/// containerd of a series: `1.6` is the distribution's (`/usr/bin`), others come from the
/// private prefix (`containerd-<series>*`). The path is returned even when missing, so the gate
/// can name it.
pub fn containerd(series: &str) -> ContainerdBins {
    let bin = if series == "1.6" {
        PathBuf::from("/usr/bin")
    } else {
        private(&format!("containerd-{series}")).join("usr/bin")
    };
    ContainerdBins {
        series: series.to_string(),
        bin,
    }
}

/// A Docker installation: `dockerd` and its `docker` client.
#[derive(Debug, Clone)]
pub struct DockerBins {
    /// `dockerd`.
    pub dockerd: PathBuf,
    /// `docker` (the matching client, not whatever `docker` is first on `PATH`).
    pub docker: PathBuf,
}

/// Docker of a major version: `20` is the distribution's, others from the private prefix.
pub fn docker(major: &str) -> DockerBins {
    if major == "20" {
        DockerBins {
            dockerd: PathBuf::from("/usr/sbin/dockerd"),
            docker: PathBuf::from("/usr/bin/docker"),
        }
    } else {
        let root = private(&format!("docker.io-{major}"));
        DockerBins {
            dockerd: root.join("usr/sbin/dockerd"),
            docker: root.join("usr/bin/docker"),
        }
    }
}

/// The newest complete private install whose directory name starts with `stem`
/// (e.g. `containerd-1.7` → `/opt/gpuslice-e2e/containerd-1.7.24`).
fn private(stem: &str) -> PathBuf {
    let root = engine_prefix();
    let mut found: Vec<PathBuf> = std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(stem) && !n.ends_with(".partial"))
                && p.join(".complete").exists()
        })
        .collect();
    found.sort();
    found
        .pop()
        .unwrap_or_else(|| root.join(format!("{stem}-not-installed")))
}

fn first_existing(c: &[&str]) -> PathBuf {
    c.iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(c[0]))
}
