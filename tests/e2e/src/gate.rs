//! Whether a suite may run on this machine, and what happens when it may not.
//!
//! Locally a suite that cannot run prints a loud `SKIPPED` banner and returns; with `CI=true`
//! it fails instead, so CI can never go green by not running something.

use crate::paths;
use std::path::PathBuf;

/// `CI` is set to `true` (or `1`).
pub fn ci() -> bool {
    matches!(
        std::env::var("CI")
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Ok("true") | Ok("1")
    )
}

/// Report that `suite` cannot run because of `why`: panics under CI, else prints a banner.
pub fn unavailable(suite: &str, why: &str) {
    if ci() {
        panic!("e2e suite {suite} cannot run under CI=true: {why}");
    }
    // Written to the stderr handle directly, not through eprintln!: the test harness captures the
    // print macros of passing tests, and a skip must be seen.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED e2e suite {suite}: {why}\n\
         !!! this proves nothing; run as root after scripts/install-engines.sh\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    );
}

/// What a suite needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Effective uid 0.
    Root,
    /// An executable at this path (an engine binary).
    Binary(PathBuf),
    /// The dist tree with the workload and the simulated driver.
    Dist,
    /// The product binaries in the dist tree (gpuslice-runtime, gpuslice-arbiter, interposer).
    Product,
}

/// Check every need; `true` when the suite can run. Otherwise reports (see [`unavailable`]).
pub fn require(suite: &str, needs: &[Need]) -> bool {
    for n in needs {
        let missing = match n {
            Need::Root => {
                // SAFETY: geteuid has no preconditions and cannot fail.
                let euid = unsafe { libc::geteuid() };
                (euid != 0).then(|| format!("not running as root (euid {euid})"))
            }
            Need::Binary(p) => {
                (!is_executable(p)).then(|| format!("engine binary {} missing", p.display()))
            }
            Need::Dist => paths::dist_missing().map(|m| format!("dist tree incomplete: {m}")),
            Need::Product => {
                paths::product_missing().map(|m| format!("gpuslice product binaries: {m}"))
            }
        };
        if let Some(why) = missing {
            unavailable(suite, &why);
            return false;
        }
    }
    true
}

fn is_executable(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// What a suite running containers through gpuslice on containerd of `bins` needs: root, that
/// containerd, runc, and the dist tree with the product binaries.
pub fn containerd_needs(bins: &paths::ContainerdBins) -> Vec<Need> {
    vec![
        Need::Root,
        Need::Binary(bins.containerd()),
        Need::Binary(paths::runc()),
        Need::Dist,
        Need::Product,
    ]
}
