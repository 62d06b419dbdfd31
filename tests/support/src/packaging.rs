//! What the product's packaging ships, read from the packaging itself so that no test keeps a
//! copy of it.

use std::path::{Path, PathBuf};

/// The repository's root (two levels above this crate).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The programs the node image carries to the host, in its `usr/bin`: the `BINARIES="..."` line
/// of `packaging/kubernetes/base/install.sh`, which installs each one and refuses an image that
/// lacks one. Panics, naming the file, when the line is gone or empty.
pub fn node_binaries() -> Vec<String> {
    let path = repo_root().join("packaging/kubernetes/base/install.sh");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let names: Vec<String> = text
        .lines()
        .find_map(|l| l.strip_prefix("BINARIES=\"")?.strip_suffix('"'))
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    assert!(
        !names.is_empty(),
        "no BINARIES=\"...\" line naming the programs in {}",
        path.display()
    );
    names
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_installer_names_the_node_programs() {
        let names = super::node_binaries();
        for p in ["gpuslice", "gpuslice-arbiter", "gpuslice-hook"] {
            assert!(names.iter().any(|n| n == p), "{p} not in {names:?}");
        }
    }
}
