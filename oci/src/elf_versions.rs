//! Symbol versions of ELF shared objects: what a file needs from the libraries it links
//! (`SHT_GNU_VERNEED`, with the undefined symbols bound to each version) and what a library
//! defines (`SHT_GNU_VERDEF`). The dynamic loader refuses to load a file one of whose needed
//! versions its library does not define; [`crate::loadable`] uses this to refuse, at create time,
//! an image the interposer cannot load in, and `cargo xtask test dist` to hold every shipped ELF
//! to the glibc floor ([`FLOOR`]).

use object::read::elf::{FileHeader, SectionTable, Sym};
use object::{elf, Endianness};

/// The oldest glibc every shipped ELF must load with (the manylinux2014 baseline).
pub const FLOOR: GlibcVersion = GlibcVersion(2, 17);

/// A glibc symbol version, `GLIBC_<major>.<minor>[.<patch>]` (the patch level is ignored:
/// `GLIBC_2.2.5` is 2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GlibcVersion(pub u32, pub u32);

impl GlibcVersion {
    /// Parses `GLIBC_2.34` style names; `None` for any other version name (`GCC_3.0`,
    /// `GLIBC_PRIVATE`).
    pub fn parse(name: &str) -> Option<Self> {
        let mut parts = name.strip_prefix("GLIBC_")?.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Self(major, minor))
    }
}

impl std::fmt::Display for GlibcVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// One version an ELF file needs from one library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionNeed {
    /// The library (`vn_file`), e.g. `libc.so.6`.
    pub file: String,
    /// The version, e.g. `GLIBC_2.34`.
    pub version: String,
    /// The undefined dynamic symbols bound to it, e.g. `dlopen`.
    pub symbols: Vec<String>,
}

/// What a shared library defines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionDefs {
    /// `e_machine` (62 for x86-64).
    pub machine: u16,
    /// Every version name it defines (its own soname's version included).
    pub versions: Vec<String>,
}

impl VersionDefs {
    /// The newest `GLIBC_x.y` defined: the glibc release of a `libc.so.6`.
    pub fn newest_glibc(&self) -> Option<GlibcVersion> {
        self.versions
            .iter()
            .filter_map(|v| GlibcVersion::parse(v))
            .max()
    }
}

/// The file is not a 64-bit ELF file or its version sections are malformed.
#[derive(Debug, thiserror::Error)]
#[error("not a readable 64-bit ELF file: {0}")]
pub struct ElfError(String);

fn bad(e: object::read::Error) -> ElfError {
    ElfError(e.to_string())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

type Sections<'a> = SectionTable<'a, elf::FileHeader64<Endianness>, &'a [u8]>;

/// The file's byte order, `e_machine` and section table.
fn sections(data: &[u8]) -> Result<(Endianness, u16, Sections<'_>), ElfError> {
    let header = elf::FileHeader64::<Endianness>::parse(data).map_err(bad)?;
    let endian = header.endian().map_err(bad)?;
    let sections = header.sections(endian, data).map_err(bad)?;
    Ok((endian, header.e_machine(endian), sections))
}

/// Every version `data` needs, in file order, each with the undefined dynamic symbols bound to
/// it. A file without a `SHT_GNU_VERNEED` section (a static binary) needs none.
pub fn version_needs(data: &[u8]) -> Result<Vec<VersionNeed>, ElfError> {
    let (endian, _, sections) = sections(data)?;
    let mut needs = Vec::new();
    let Some((mut files, link)) = sections.gnu_verneed(endian, data).map_err(bad)? else {
        return Ok(needs);
    };
    let strings = sections.strings(endian, data, link).map_err(bad)?;
    while let Some((need, mut versions)) = files.next().map_err(bad)? {
        let file = text(need.file(endian, strings).map_err(bad)?);
        while let Some(v) = versions.next().map_err(bad)? {
            needs.push(VersionNeed {
                file: file.clone(),
                version: text(v.name(endian, strings).map_err(bad)?),
                symbols: Vec::new(),
            });
        }
    }
    let Some(table) = sections.versions(endian, data).map_err(bad)? else {
        return Ok(needs);
    };
    let symbols = sections
        .symbols(endian, data, elf::SHT_DYNSYM)
        .map_err(bad)?;
    for (index, sym) in symbols.enumerate() {
        if !sym.is_undefined(endian) {
            continue;
        }
        let Some(v) = table
            .version(table.version_index(endian, index))
            .map_err(bad)?
        else {
            continue;
        };
        let (file, version) = (v.file().map(text), text(v.name()));
        if let Some(n) = needs
            .iter_mut()
            .find(|n| Some(&n.file) == file.as_ref() && n.version == version)
        {
            n.symbols
                .push(text(sym.name(endian, symbols.strings()).map_err(bad)?));
        }
    }
    Ok(needs)
}

/// The undefined, non-weak dynamic symbols of `data` bound to no version. Linked against
/// glibc 2.17's stubs, a glibc function newer than 2.17 ends up so (a shared object may leave
/// symbols undefined): it fails to resolve on an older glibc, and no version need shows it.
/// Weak ones are looked up by Rust's std at run time and may be absent.
pub fn unversioned_imports(data: &[u8]) -> Result<Vec<String>, ElfError> {
    let (endian, _, sections) = sections(data)?;
    let Some(table) = sections.versions(endian, data).map_err(bad)? else {
        return Ok(Vec::new());
    };
    let symbols = sections
        .symbols(endian, data, elf::SHT_DYNSYM)
        .map_err(bad)?;
    let mut out = Vec::new();
    for (index, sym) in symbols.enumerate() {
        let named = sym.st_name(endian) != 0;
        if !named || !sym.is_undefined(endian) || sym.st_bind() != elf::STB_GLOBAL {
            continue;
        }
        if table.version_index(endian, index).index() <= elf::VER_NDX_GLOBAL {
            out.push(text(sym.name(endian, symbols.strings()).map_err(bad)?));
        }
    }
    Ok(out)
}

/// What the shared library `data` defines. A library without a `SHT_GNU_VERDEF` section
/// defines no versions.
pub fn version_defs(data: &[u8]) -> Result<VersionDefs, ElfError> {
    let (endian, machine, sections) = sections(data)?;
    let mut versions = Vec::new();
    if let Some((mut defs, link)) = sections.gnu_verdef(endian, data).map_err(bad)? {
        let strings = sections.strings(endian, data, link).map_err(bad)?;
        while let Some((_, mut names)) = defs.next().map_err(bad)? {
            // The first name is the version's own; the others are the versions it inherits.
            if let Some(name) = names.next().map_err(bad)? {
                versions.push(text(name.name(endian, strings).map_err(bad)?));
            }
        }
    }
    Ok(VersionDefs { machine, versions })
}

/// The glibc symbol versions above `floor` that `needs` holds: (version, library, symbols).
pub fn above(needs: &[VersionNeed], floor: GlibcVersion) -> Vec<&VersionNeed> {
    needs
        .iter()
        .filter(|n| GlibcVersion::parse(&n.version).is_some_and(|v| v > floor))
        .collect()
}

/// The smallest well-formed 64-bit little-endian ELF shared object for `machine`: a header and
/// nothing else, so no versions needed or defined. A stand-in library for tests and fixtures
/// (the runtime's tests use it as the interposer and as an image's `libc.so.6`).
pub fn minimal_elf(machine: u16) -> Vec<u8> {
    let mut h = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    h.extend(elf::ET_DYN.to_le_bytes());
    h.extend(machine.to_le_bytes());
    h.extend(1u32.to_le_bytes()); // e_version
    h.extend([0u8; 24]); // e_entry, e_phoff, e_shoff
    h.extend(0u32.to_le_bytes()); // e_flags
    for half in [64u16, 56, 0, 64, 0, 0] {
        // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
        h.extend(half.to_le_bytes());
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_versions_parse_and_order() {
        assert_eq!(GlibcVersion::parse("GLIBC_2.34"), Some(GlibcVersion(2, 34)));
        assert_eq!(GlibcVersion::parse("GLIBC_2.2.5"), Some(GlibcVersion(2, 2)));
        assert_eq!(GlibcVersion::parse("GLIBC_PRIVATE"), None);
        assert_eq!(GlibcVersion::parse("GCC_3.0"), None);
        assert_eq!(GlibcVersion::parse("GLIBC_2"), None);
        assert!(GlibcVersion(2, 34) > FLOOR && GlibcVersion(2, 9) < FLOOR);
        assert_eq!(GlibcVersion(2, 31).to_string(), "2.31");
    }

    /// The test binary itself links glibc: it needs versions from `libc.so.6`, with symbols.
    #[test]
    fn reads_this_binary_and_the_hosts_libc() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let needs = version_needs(&me).unwrap();
        let libc_needs: Vec<_> = needs.iter().filter(|n| n.file == "libc.so.6").collect();
        assert!(!libc_needs.is_empty(), "{needs:?}");
        assert!(
            libc_needs.iter().any(|n| !n.symbols.is_empty()),
            "{needs:?}"
        );
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .expect("the host's libc.so.6");
        let defs = version_defs(&libc).unwrap();
        assert_eq!(defs.machine, elf::EM_X86_64);
        assert!(defs.newest_glibc().unwrap() >= FLOOR, "{defs:?}");
        // Every libc version this binary needs is defined by the libc it runs with.
        for n in libc_needs {
            assert!(defs.versions.contains(&n.version), "{n:?}");
        }
    }

    /// A glibc import whose version entry is set to "global" (as a symbol missing from the
    /// stubs is linked) is reported; the binary as linked reports none.
    #[test]
    fn an_unversioned_import_is_found() {
        use object::read::elf::SectionHeader;
        let mut me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(unversioned_imports(&me).unwrap(), Vec::<String>::new());
        let (endian, _, sections) = sections(&me).unwrap();
        let versym = sections
            .iter()
            .find(|s| s.sh_type(endian) == elf::SHT_GNU_VERSYM)
            .unwrap()
            .sh_offset(endian) as usize;
        let symbols = sections.symbols(endian, &me[..], elf::SHT_DYNSYM).unwrap();
        let (index, name) = symbols
            .enumerate()
            .find(|(_, s)| {
                s.is_undefined(endian) && s.st_bind() == elf::STB_GLOBAL && s.st_name(endian) != 0
            })
            .map(|(i, s)| (i.0, text(s.name(endian, symbols.strings()).unwrap())))
            .unwrap();
        me[versym + 2 * index..versym + 2 * index + 2].copy_from_slice(&1u16.to_le_bytes());
        assert_eq!(unversioned_imports(&me).unwrap(), [name]);
    }

    #[test]
    fn the_minimal_elf_parses_with_nothing_versioned() {
        let e = minimal_elf(elf::EM_AARCH64);
        assert_eq!(e.len(), 64);
        assert!(version_needs(&e).unwrap().is_empty());
        let d = version_defs(&e).unwrap();
        assert_eq!((d.machine, d.versions.len()), (elf::EM_AARCH64, 0));
    }

    #[test]
    fn rejects_what_is_not_elf() {
        let e = version_needs(b"#!/bin/sh\n").unwrap_err().to_string();
        assert!(e.starts_with("not a readable 64-bit ELF file"), "{e}");
        assert!(version_defs(&[0x7f, b'E', b'L', b'F']).is_err());
    }

    #[test]
    fn above_picks_glibc_versions_past_the_floor() {
        let need = |file: &str, version: &str| VersionNeed {
            file: file.into(),
            version: version.into(),
            symbols: vec!["f".into()],
        };
        let needs = [
            need("libc.so.6", "GLIBC_2.2.5"),
            need("libc.so.6", "GLIBC_2.34"),
            need("libgcc_s.so.1", "GCC_4.2.0"),
            need("libc.so.6", "GLIBC_2.17"),
        ];
        let over: Vec<_> = above(&needs, FLOOR).iter().map(|n| &n.version).collect();
        assert_eq!(over, ["GLIBC_2.34"]);
    }
}
