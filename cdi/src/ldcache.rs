//! Parser for glibc's loader cache (`/etc/ld.so.cache`): the "glibc-ld.so.cache1.1" format,
//! alone (glibc ≥ 2.32 default) or after the old "ld.so-1.7.0" table (compat format). Only
//! what CDI generation needs: each entry's soname key, path and flags.

use std::path::Path;

/// One cache entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The soname (e.g. `libcuda.so.1`).
    pub name: String,
    /// The path the loader opens (e.g. `/usr/lib/x86_64-linux-gnu/libcuda.so.1`).
    pub path: String,
    /// glibc's `FLAG_*` bits (type in the low byte, architecture in the next).
    pub flags: i32,
}

impl Entry {
    /// Whether the entry is a 64-bit library of this machine's architecture (or any ELF
    /// libc6 entry when the architecture is not one glibc tags).
    pub fn native(&self) -> bool {
        const FLAG_ELF_LIBC6: i32 = 0x0003;
        let ty = self.flags & 0x00ff;
        let arch = self.flags & 0xff00;
        if ty != FLAG_ELF_LIBC6 {
            return false;
        }
        match std::env::consts::ARCH {
            "x86_64" => arch == 0x0300,
            "aarch64" => arch == 0x0a00,
            _ => true,
        }
    }
}

/// Why a cache could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Format(String),
}

const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
/// magic(20) nlibs(4) len_strings(4) flags(1) pad(3) extension_offset(4) unused(12).
const NEW_HEADER: usize = 48;
/// flags(4) key(4) value(4) osversion(4) hwcap(8).
const NEW_ENTRY: usize = 24;
const OLD_ENTRY: usize = 12;

/// Reads and parses the cache at `path`.
pub fn read(path: &Path) -> Result<Vec<Entry>, CacheError> {
    let data = std::fs::read(path).map_err(|source| CacheError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&data).map_err(|e| CacheError::Format(format!("{}: {e}", path.display())))
}

fn u32_at(d: &[u8], at: usize, big: bool) -> Result<u32, String> {
    let b: [u8; 4] = d
        .get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("truncated at byte {at}"))?;
    Ok(if big {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    })
}

fn cstr_at(d: &[u8], at: usize) -> Result<String, String> {
    let rest = d
        .get(at..)
        .ok_or_else(|| format!("string offset {at} past the end"))?;
    let end = rest
        .iter()
        .position(|b| *b == 0)
        .ok_or_else(|| format!("unterminated string at {at}"))?;
    String::from_utf8(rest[..end].to_vec()).map_err(|_| format!("string at {at} is not UTF-8"))
}

/// Parses a cache image.
pub fn parse(data: &[u8]) -> Result<Vec<Entry>, String> {
    let start = if data.starts_with(NEW_MAGIC) {
        0
    } else if data.starts_with(OLD_MAGIC) {
        // Old table: magic (11, padded to 12), nlibs, then 12-byte entries; the new header
        // follows, aligned to 8.
        let n = u32_at(data, 12, cfg!(target_endian = "big"))? as usize;
        let end = n
            .checked_mul(OLD_ENTRY)
            .and_then(|x| x.checked_add(16))
            .ok_or("old table too large")?;
        let aligned = end.div_ceil(8) * 8;
        if !data
            .get(aligned..)
            .is_some_and(|d| d.starts_with(NEW_MAGIC))
        {
            return Err(
                "old-format cache without a glibc-ld.so.cache1.1 part (unsupported)".into(),
            );
        }
        aligned
    } else {
        return Err("not a glibc-ld.so.cache1.1 loader cache (bad magic)".into());
    };
    let d = &data[start..];
    if d.len() < NEW_HEADER {
        return Err("truncated header".into());
    }
    let big = match d[28] {
        0 => cfg!(target_endian = "big"),
        2 => false,
        3 => true,
        f => return Err(format!("unsupported endianness flag {f}")),
    };
    let n = u32_at(d, 20, big)? as usize;
    let table_end = n
        .checked_mul(NEW_ENTRY)
        .and_then(|x| x.checked_add(NEW_HEADER))
        .ok_or("entry table too large")?;
    if table_end > d.len() {
        return Err(format!("{n} entries do not fit in {} bytes", d.len()));
    }
    (0..n)
        .map(|i| {
            let at = NEW_HEADER + i * NEW_ENTRY;
            // Offsets are relative to the new header (glibc's cache_data).
            Ok(Entry {
                flags: u32_at(d, at, big)? as i32,
                name: cstr_at(d, u32_at(d, at + 4, big)? as usize)?,
                path: cstr_at(d, u32_at(d, at + 8, big)? as usize)?,
            })
        })
        .collect()
}

/// Encodes `(soname, path, flags)` entries as a little-endian "glibc-ld.so.cache1.1" image,
/// the layout ldconfig writes (fixtures for tests of fake driver roots).
pub fn encode(entries: &[(&str, &str, i32)]) -> Vec<u8> {
    let mut strings = Vec::new();
    let base = NEW_HEADER + entries.len() * NEW_ENTRY;
    let mut table = Vec::new();
    for (name, path, flags) in entries {
        let k = base + strings.len();
        strings.extend_from_slice(name.as_bytes());
        strings.push(0);
        let v = base + strings.len();
        strings.extend_from_slice(path.as_bytes());
        strings.push(0);
        table.extend_from_slice(&flags.to_le_bytes());
        table.extend_from_slice(&(k as u32).to_le_bytes());
        table.extend_from_slice(&(v as u32).to_le_bytes());
        table.extend_from_slice(&0u32.to_le_bytes());
        table.extend_from_slice(&0u64.to_le_bytes());
    }
    let mut out = NEW_MAGIC.to_vec();
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
    out.push(2);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&[0; 16]);
    out.extend(table);
    out.extend(strings);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_synthetic_cache() {
        let img = encode(&[
            (
                "libcuda.so.1",
                "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                0x0303,
            ),
            ("libc.so.6", "/lib/i386-linux-gnu/libc.so.6", 0x0003),
        ]);
        let e = parse(&img).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].name, "libcuda.so.1");
        assert_eq!(e[0].path, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
        assert_eq!(e[0].flags, 0x0303);
        assert_eq!(e[1].path, "/lib/i386-linux-gnu/libc.so.6");
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        assert!(parse(b"hello").unwrap_err().contains("bad magic"));
        let img = encode(&[("a.so", "/a.so", 0x0303)]);
        assert!(parse(&img[..60]).is_err());
        let mut bad = img.clone();
        bad[NEW_HEADER + 4..NEW_HEADER + 8].copy_from_slice(&9999u32.to_le_bytes());
        assert!(parse(&bad).unwrap_err().contains("past the end"));
    }

    #[test]
    fn compat_format_skips_old_table() {
        let new = encode(&[("libx.so.1", "/usr/lib/libx.so.1", 0x0303)]);
        let mut img = OLD_MAGIC.to_vec();
        img.push(0);
        img.extend_from_slice(&1u32.to_ne_bytes());
        img.extend_from_slice(&[0; OLD_ENTRY]); // one old entry (ignored)
        while !img.len().is_multiple_of(8) {
            img.push(0);
        }
        img.extend(new);
        let e = parse(&img).unwrap();
        assert_eq!(e[0].name, "libx.so.1");
    }

    #[test]
    fn parses_the_hosts_real_cache() {
        // The machine's own cache, written by the real ldconfig: every entry resolves.
        let p = Path::new("/etc/ld.so.cache");
        if !p.exists() {
            eprintln!("SKIPPED: no /etc/ld.so.cache on this machine");
            return;
        }
        let e = read(p).unwrap();
        assert!(e.iter().any(|x| x.name.starts_with("libc.so.")), "{e:?}");
        assert!(e.iter().all(|x| x.path.starts_with('/')));
    }
    #[test]
    fn agrees_with_ldconfig_p() {
        // `ldconfig -p` prints every entry of the real cache as "\tNAME (…) => PATH".
        let Ok(out) = std::process::Command::new("ldconfig").arg("-p").output() else {
            eprintln!("SKIPPED: no ldconfig");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let theirs: Vec<(String, String)> = text
            .lines()
            .filter_map(|l| {
                let (l, path) = l.trim().split_once(" => ")?;
                Some((l.split(' ').next()?.to_string(), path.to_string()))
            })
            .collect();
        let ours: Vec<(String, String)> = read(Path::new("/etc/ld.so.cache"))
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.path))
            .collect();
        assert_eq!(ours, theirs);
    }
}
