//! The glibc floor, checked on what was built: every ELF file under a tree (the dist tree, the
//! gpu-kit tree) may need no `GLIBC_x.y` symbol version above [`FLOOR`] (glibc 2.17). A file
//! that does would not load — or, for the interposer, not be preloaded — on an older glibc.
//! Nor may it import a symbol with no version at all (not weak): linked against glibc 2.17's
//! stubs, a newer glibc function is left so and fails to resolve on an older glibc.

use anyhow::{bail, Context, Result};
use gpuslice_oci::elf_versions::{above, unversioned_imports, version_needs, GlibcVersion, FLOOR};
use std::fs;
use std::path::{Path, PathBuf};

/// The ELF files under `dir` (regular files starting with the ELF magic), sorted.
pub fn elf_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let t = e.file_type()?;
        if t.is_dir() {
            out.extend(elf_files(&e.path())?);
        } else if t.is_file() {
            let mut magic = [0u8; 4];
            let n = std::io::Read::read(&mut fs::File::open(e.path())?, &mut magic)?;
            if n == 4 && magic == *b"\x7fELF" {
                out.push(e.path());
            }
        }
    }
    Ok(out)
}

/// Fails naming every file, version and symbol above `floor`; returns the files checked.
pub fn check_tree(dir: &Path, floor: GlibcVersion) -> Result<Vec<PathBuf>> {
    let files = elf_files(dir)?;
    if files.is_empty() {
        bail!("{}: no ELF files to check", dir.display());
    }
    let mut over = Vec::new();
    for f in &files {
        let bytes = fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let needs = version_needs(&bytes).with_context(|| f.display().to_string())?;
        for s in unversioned_imports(&bytes).with_context(|| f.display().to_string())? {
            over.push(format!(
                "{}: {s} imported with no symbol version (not in glibc {floor}'s stubs?)",
                f.strip_prefix(dir).unwrap_or(f).display()
            ));
        }
        for n in above(&needs, floor) {
            over.push(format!(
                "{}: {} from {} ({})",
                f.strip_prefix(dir).unwrap_or(f).display(),
                n.version,
                n.file,
                n.symbols.join(", ")
            ));
        }
    }
    if !over.is_empty() {
        bail!(
            "{} version needs above glibc {floor} or unversioned imports under {}:\n  {}",
            over.len(),
            dir.display(),
            over.join("\n  ")
        );
    }
    Ok(files)
}

/// [`check_tree`] at the shipped [`FLOOR`], reporting what was checked.
pub fn check(dir: &Path, what: &str) -> Result<()> {
    let files = check_tree(dir, FLOOR)?;
    println!(
        "{what}: {} ELF files need nothing above glibc {FLOOR}",
        files.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("elf-floor-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("usr/bin")).unwrap();
        fs::write(d.join("usr/bin/script"), "#!/bin/sh\n").unwrap();
        fs::copy(std::env::current_exe().unwrap(), d.join("usr/bin/tool")).unwrap();
        d
    }

    #[test]
    fn a_need_above_the_floor_is_named_with_file_and_symbol() {
        let d = tree("over");
        assert_eq!(elf_files(&d).unwrap(), [d.join("usr/bin/tool")]);
        // Every glibc-linked binary needs GLIBC_2.2.5 at least: above a floor of 2.1.
        let e = check_tree(&d, GlibcVersion(2, 1)).unwrap_err().to_string();
        assert!(
            e.contains("above glibc 2.1 or unversioned imports under"),
            "{e}"
        );
        assert!(
            e.contains("\n  usr/bin/tool: GLIBC_2.2.5 from libc.so.6 ("),
            "{e}"
        );
        let named = e.split("GLIBC_2.2.5 from libc.so.6 (").nth(1).unwrap();
        assert!(!named.starts_with(')'), "no symbol named: {e}");
        // And nothing is above a glibc from the future.
        assert_eq!(check_tree(&d, GlibcVersion(99, 0)).unwrap().len(), 1);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_tree_without_elf_files_is_an_error() {
        let d = tree("none");
        fs::remove_file(d.join("usr/bin/tool")).unwrap();
        let e = check_tree(&d, FLOOR).unwrap_err().to_string();
        assert!(e.ends_with("no ELF files to check"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
