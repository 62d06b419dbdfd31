//! The in-container paths of a slice (`/run/gpuslice`, the interposer, the preload file) are
//! spelled once, as `gpuslice_region::layout` constants: no product crate's code outside them
//! writes them again. Comments and unit tests (after `#[cfg(test)]`) may: tests spell the
//! contract out on purpose, as witnesses independent of the constants, and so do the suites
//! under `tests/`, which are not scanned.

use std::path::{Path, PathBuf};

/// What must not be spelled outside the constants (quote-less, so `"run/gpuslice"` and a
/// path inside a message count too).
const SPELLINGS: [&str; 3] = [
    "run/gpuslice",
    "/usr/lib/gpuslice/libgpuslice.so",
    "etc/ld.so.preload",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `file:line: text` for every spelling in code (not comments, not the unit tests at the end).
fn offences(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        let code = t.split("//").next().unwrap_or("");
        if t.starts_with("//") || !SPELLINGS.iter().any(|s| code.contains(s)) {
            continue;
        }
        out.push(format!("{}:{}: {}", file.display(), n + 1, t));
    }
    out
}

/// The `src/` of every product crate: a top-level directory with a `Cargo.toml`, but for the
/// suites (`tests/`), the fuzz targets and `region` itself.
fn product_sources() -> Vec<PathBuf> {
    let root = workspace();
    let mut files = Vec::new();
    for e in std::fs::read_dir(&root).unwrap().flatten() {
        let dir = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        if ["tests", "fuzz", "target", "region"].contains(&name.as_str())
            || !dir.join("Cargo.toml").is_file()
            || !dir.join("src").is_dir()
        {
            continue;
        }
        rust_files(&dir.join("src"), &mut files);
    }
    files.sort();
    files
}

#[test]
fn container_paths_are_spelled_only_in_regions_constants() {
    let files = product_sources();
    // The scan reaches the crates that render a container (else it proves nothing).
    for must in [
        "oci/src/edit.rs",
        "cdi/src/container.rs",
        "interposer/src/state.rs",
    ] {
        assert!(
            files.iter().any(|f| f.ends_with(must)),
            "{must} not scanned: {files:?}"
        );
    }
    let found: Vec<String> = files.iter().flat_map(|f| offences(f)).collect();
    assert!(
        found.is_empty(),
        "use gpuslice_region::layout's CONTAINER_* constants instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_finds_a_spelling_where_there_is_one() {
    // region's own constants are the spellings: the scanner must see them.
    let layout = workspace().join("region/src/layout.rs");
    let found = offences(&layout);
    assert!(
        found.iter().any(|o| o.contains("CONTAINER_SLICE_DIR")),
        "{found:?}"
    );
    assert!(found.iter().any(|o| o.contains("CONTAINER_INTERPOSER")));
}

#[test]
fn the_usage_file_is_in_the_slice_directory() {
    use gpuslice_region::layout::{CONTAINER_SLICE_DIR, CONTAINER_USAGE_FILE, USAGE_FILE};
    assert_eq!(
        CONTAINER_USAGE_FILE,
        format!("{CONTAINER_SLICE_DIR}/{USAGE_FILE}")
    );
}
