//! The package's `Depends:` line, computed from the ELF files it ships: every `NEEDED` shared
//! library must map to a Debian package in [`SONAMES`] (an unknown one is an error naming the
//! file and the library, never a silently missing dependency), and `libc6` gets the highest
//! `GLIBC_x.y` symbol version the files reference as its minimum.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Shared libraries the shipped files may need, and the package that provides each.
const SONAMES: &[(&str, &str)] = &[
    ("libc.so.6", "libc6"),
    ("libm.so.6", "libc6"),
    ("libdl.so.2", "libc6"),
    ("libpthread.so.0", "libc6"),
    ("librt.so.1", "libc6"),
    ("ld-linux-x86-64.so.2", "libc6"),
    ("ld-linux-aarch64.so.1", "libc6"),
    ("libgcc_s.so.1", "libgcc-s1"),
];

/// What one ELF file needs: its `NEEDED` entries and the glibc versions it references.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// `NEEDED` sonames.
    pub libraries: Vec<String>,
    /// Highest `GLIBC_x.y[.z]` version referenced, as numbers.
    pub glibc: Option<Vec<u32>>,
}

/// Read `file`'s needs with `readelf -d -V -W`.
pub fn read(file: &Path) -> Result<Needs> {
    let out = Command::new("readelf")
        .args(["-d", "-V", "-W"])
        .arg(file)
        .output()
        .context("running readelf (binutils)")?;
    if !out.status.success() {
        bail!(
            "readelf {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(parse_readelf(&String::from_utf8_lossy(&out.stdout)))
}

/// Parse `readelf -d -V -W` output.
pub fn parse_readelf(text: &str) -> Needs {
    let mut n = Needs::default();
    for line in text.lines() {
        if line.contains("(NEEDED)") {
            if let Some(lib) = line.split('[').nth(1).and_then(|r| r.split(']').next()) {
                n.libraries.push(lib.to_string());
            }
        }
        for word in line.split_whitespace() {
            let Some(v) = word.strip_prefix("GLIBC_") else {
                continue;
            };
            let parsed: Option<Vec<u32>> = v.split('.').map(|p| p.parse().ok()).collect();
            if let Some(p) = parsed {
                if n.glibc.as_ref().is_none_or(|old| p > *old) {
                    n.glibc = Some(p);
                }
            }
        }
    }
    n
}

/// The `Depends:` value for files with these needs (`file` names each in errors).
pub fn depends(needs: &[(String, Needs)]) -> Result<String> {
    let mut pkgs: BTreeMap<&str, Option<Vec<u32>>> = BTreeMap::new();
    for (file, n) in needs {
        for lib in &n.libraries {
            let Some((_, pkg)) = SONAMES.iter().find(|(s, _)| s == lib) else {
                bail!(
                    "{file} needs {lib}, which is not in xtask/src/package/deps.rs SONAMES: \
                     add the Debian package that provides it"
                );
            };
            pkgs.entry(pkg).or_insert(None);
        }
        if let Some(v) = &n.glibc {
            let e = pkgs.entry("libc6").or_insert(None);
            if e.as_ref().is_none_or(|old| v > old) {
                *e = Some(v.clone());
            }
        }
    }
    if pkgs.is_empty() {
        bail!("no shared library dependencies found: are the files dynamically linked ELF?");
    }
    Ok(pkgs
        .into_iter()
        .map(|(p, v)| match v {
            Some(v) => {
                let s: Vec<String> = v.iter().map(u32::to_string).collect();
                format!("{p} (>= {})", s.join("."))
            }
            None => p.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
 0x0000000000000001 (NEEDED)             Shared library: [libgcc_s.so.1]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
  000000: Version: 1  File: libgcc_s.so.1  Cnt: 1
  0x0030:   Name: GCC_3.0  Flags: none  Version: 7
  0x0010: Version: 1  File: libc.so.6  Cnt: 3
  0x0060:   Name: GLIBC_2.2.5  Flags: none  Version: 3
  0x0140:   Name: GLIBC_2.34  Flags: none  Version: 2
  0x0070:   Name: GLIBC_2.3.4  Flags: none  Version: 14
";

    #[test]
    fn parses_needed_and_highest_glibc() {
        let n = parse_readelf(SAMPLE);
        assert_eq!(n.libraries, ["libgcc_s.so.1", "libc.so.6"]);
        // 2.34 > 2.3.4 > 2.2.5 (numeric, not textual, comparison)
        assert_eq!(n.glibc, Some(vec![2, 34]));
    }

    #[test]
    fn depends_takes_the_highest_glibc_over_all_files() {
        let a = parse_readelf(SAMPLE);
        let b = Needs {
            libraries: vec!["libc.so.6".into()],
            glibc: Some(vec![2, 35]),
        };
        let d = depends(&[("a".into(), a), ("b".into(), b)]).unwrap();
        assert_eq!(d, "libc6 (>= 2.35), libgcc-s1");
    }

    #[test]
    fn unknown_library_is_an_error_naming_file_and_library() {
        let n = Needs {
            libraries: vec!["libcuda.so.1".into()],
            glibc: None,
        };
        let e = depends(&[("usr/bin/x".into(), n)]).unwrap_err().to_string();
        assert!(e.contains("usr/bin/x") && e.contains("libcuda.so.1"), "{e}");
    }

    #[test]
    fn static_files_are_refused() {
        let e = depends(&[("x".into(), Needs::default())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no shared library"), "{e}");
    }
}
