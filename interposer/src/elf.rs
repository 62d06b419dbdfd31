//! Finds glibc's own `dlsym` / `dlvsym` by reading the dynamic symbol tables of the loaded C
//! library (`dl_iterate_phdr`), because this library exports both names itself: any ordinary
//! reference to them, even a versioned one, would bind back to our overrides.
//!
//! Every read goes through [`Image`], which checks it against the object's readable `PT_LOAD`
//! segments: a table entry or offset that points elsewhere (a damaged or unusual object) ends
//! the lookup with "not found" instead of a fault.

use std::ffi::{c_int, c_void, CStr};

/// Program headers of one object we keep (more are ignored: an object has a handful).
const MAX_LOADS: usize = 16;

// Dynamic-section tags (the ELF and GNU specs; `libc` has no constants for them).
const DT_NULL: i64 = 0;
const DT_HASH: i64 = 4;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;
/// Symbol type `STT_FUNC` (low nibble of `st_info`).
const STT_FUNC: u8 = 2;
/// A `DT_VERSYM` entry with this bit is a hidden (non-default) version.
const VERSYM_HIDDEN: u16 = 0x8000;
/// Longest dynamic section walked.
const MAX_DYN: u64 = 4096;

/// `Elf64_Dyn` (`libc` has no such type).
#[repr(C)]
#[derive(Clone, Copy)]
struct Dyn {
    tag: i64,
    val: u64,
}

const SYM_SIZE: u64 = std::mem::size_of::<libc::Elf64_Sym>() as u64;

/// The readable address ranges of one loaded object.
struct Image {
    base: u64,
    loads: [(u64, u64); MAX_LOADS],
    n: usize,
}

impl Image {
    /// The object loaded at `base` with these program headers, and the address of its dynamic
    /// section if it has one.
    fn new(base: u64, phdrs: &[libc::Elf64_Phdr]) -> (Image, Option<u64>) {
        let mut img = Image {
            base,
            loads: [(0, 0); MAX_LOADS],
            n: 0,
        };
        let mut dynamic = None;
        for ph in phdrs {
            let start = base.wrapping_add(ph.p_vaddr);
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_R != 0 && img.n < MAX_LOADS {
                if let (Some(slot), Some(end)) =
                    (img.loads.get_mut(img.n), start.checked_add(ph.p_memsz))
                {
                    *slot = (start, end);
                    img.n += 1;
                }
            } else if ph.p_type == libc::PT_DYNAMIC {
                dynamic = Some(start);
            }
        }
        (img, dynamic)
    }

    /// Whether `[addr, addr + len)` lies in one readable segment.
    fn readable(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        self.loads
            .iter()
            .take(self.n)
            .any(|&(s, e)| s <= addr && end <= e)
    }

    /// The `T` at `addr`, when it lies in a readable segment.
    fn read<T: Copy>(&self, addr: u64) -> Option<T> {
        if !self.readable(addr, std::mem::size_of::<T>() as u64) {
            return None;
        }
        // SAFETY: the range is inside a readable PT_LOAD segment of a loaded object (checked
        // just above; `Image::new`'s caller guarantees the segments are mapped); unaligned reads
        // are allowed for any plain-data `T`.
        Some(unsafe { std::ptr::read_unaligned(addr as *const T) })
    }

    /// Whether the NUL-terminated string at `addr` is `name`.
    fn name_is(&self, addr: u64, name: &[u8]) -> bool {
        let len = name.len() as u64;
        if !self.readable(addr, len + 1) {
            return false;
        }
        // SAFETY: `len + 1` bytes from `addr` lie in a readable segment (checked above).
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, name.len() + 1) };
        bytes.get(..name.len()) == Some(name) && bytes.last() == Some(&0)
    }

    /// A dynamic-section address: absolute, or relative to the load base (some loaders leave
    /// them unrelocated).
    fn fix(&self, v: u64) -> u64 {
        if v < self.base {
            v.wrapping_add(self.base)
        } else {
            v
        }
    }
}

struct Query {
    name: &'static [u8],
    found: *mut c_void,
}

/// Address of the default-version definition of `name` (NUL-free bytes) in libc.so.6 or
/// libdl.so.2, or null.
pub fn glibc_symbol(name: &'static [u8]) -> *mut c_void {
    let mut q = Query {
        name,
        found: std::ptr::null_mut(),
    };
    // SAFETY: dl_iterate_phdr calls `visit` synchronously with valid `dl_phdr_info` pointers and
    // passes our `&mut q` back unchanged as `data`.
    unsafe {
        libc::dl_iterate_phdr(Some(visit), (&mut q as *mut Query).cast());
    }
    q.found
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `Query` passed by glibc_symbol; `info` is valid for this call.
    let (q, info) = unsafe { (&mut *data.cast::<Query>(), &*info) };
    if info.dlpi_name.is_null() || info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: dlpi_name is a NUL-terminated string owned by the dynamic linker.
    let obj = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
    let file = obj.rsplit(|&b| b == b'/').next().unwrap_or(obj);
    if !(file.starts_with(b"libc.so") || file.starts_with(b"libdl.so")) {
        return 0;
    }
    // SAFETY: dlpi_phdr points to dlpi_phnum program headers of a loaded object, whose PT_LOAD
    // segments are mapped at dlpi_addr + p_vaddr for p_memsz bytes.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let (img, dynamic) = Image::new(info.dlpi_addr, phdrs);
    let found = dynamic.map_or(std::ptr::null_mut(), |d| lookup(&img, d, q.name));
    if !found.is_null() {
        q.found = found;
        return 1;
    }
    0
}

/// The default-version function `name` of `img`, whose dynamic section is at `dynamic`.
fn lookup(img: &Image, dynamic: u64, name: &[u8]) -> *mut c_void {
    let (mut strtab, mut symtab, mut hash, mut gnu_hash, mut versym) = (0, 0, 0, 0, 0);
    for i in 0..MAX_DYN {
        let Some(e) = img.read::<Dyn>(dynamic.wrapping_add(i * 16)) else {
            return std::ptr::null_mut();
        };
        match e.tag {
            DT_NULL => break,
            DT_STRTAB => strtab = img.fix(e.val),
            DT_SYMTAB => symtab = img.fix(e.val),
            DT_HASH => hash = img.fix(e.val),
            DT_GNU_HASH => gnu_hash = img.fix(e.val),
            DT_VERSYM => versym = img.fix(e.val),
            _ => {}
        }
    }
    if strtab == 0 || symtab == 0 {
        return std::ptr::null_mut();
    }
    let count = if hash != 0 {
        img.read::<u32>(hash.wrapping_add(4)).map(u64::from)
    } else if gnu_hash != 0 {
        gnu_symbol_count(img, gnu_hash)
    } else {
        None
    };
    let Some(count) = count else {
        return std::ptr::null_mut();
    };
    for i in 0..count {
        let Some(s) = img.read::<libc::Elf64_Sym>(symtab.wrapping_add(i * SYM_SIZE)) else {
            break; // past the table's segment: a count that lies
        };
        if s.st_shndx == 0 || s.st_value == 0 || (s.st_info & 0xf) != STT_FUNC {
            continue; // undefined or not a function
        }
        if !img.name_is(strtab.wrapping_add(u64::from(s.st_name)), name) {
            continue;
        }
        if versym != 0 {
            match img.read::<u16>(versym.wrapping_add(i * 2)) {
                Some(v) if v & VERSYM_HIDDEN == 0 => {}
                // A hidden version (e.g. dlsym@GLIBC_2.2.5 on 2.34+), or no entry.
                _ => continue,
            }
        }
        return img.base.wrapping_add(s.st_value) as *mut c_void;
    }
    std::ptr::null_mut()
}

/// The number of symbols a `DT_GNU_HASH` table covers: the highest bucket start, then along its
/// chain to the entry with the end bit.
fn gnu_symbol_count(img: &Image, gh: u64) -> Option<u64> {
    let nbuckets = u64::from(img.read::<u32>(gh)?);
    let symoffset = u64::from(img.read::<u32>(gh.wrapping_add(4))?);
    let bloom_size = u64::from(img.read::<u32>(gh.wrapping_add(8))?);
    let buckets = gh
        .checked_add(16)?
        .checked_add(bloom_size.checked_mul(8)?)?;
    let chain = buckets.checked_add(nbuckets.checked_mul(4)?)?;
    let mut max = 0u64;
    for i in 0..nbuckets {
        max = max.max(u64::from(img.read::<u32>(buckets.wrapping_add(i * 4))?));
    }
    if max < symoffset {
        return Some(symoffset);
    }
    // Each read is bounds-checked, so a chain without an end bit stops at its segment's end.
    while img.read::<u32>(chain.wrapping_add((max - symoffset) * 4))? & 1 == 0 {
        max += 1;
    }
    Some(max + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic loaded object in one buffer: dynamic section, DT_HASH, symbols, strings,
    /// versions. Offsets are relative to the buffer (the "load base").
    struct Fake {
        buf: Vec<u64>,
    }

    const DYN: usize = 0; // 8 entries × 2 words
    const HASH: usize = 16; // nbucket, nchain as u32s
    const SYMS: usize = 20; // 4 symbols × 3 words
    const STRS: usize = 32;
    const VERS: usize = 40;

    impl Fake {
        fn new(nchain: u32, strtab_off: u64) -> Fake {
            let mut buf = vec![0u64; 48];
            let tags = [
                (DT_HASH, HASH as u64 * 8),
                (DT_SYMTAB, SYMS as u64 * 8),
                (DT_STRTAB, strtab_off),
                (DT_VERSYM, VERS as u64 * 8),
            ];
            for (i, (t, v)) in tags.iter().enumerate() {
                buf[DYN + 2 * i] = u64::try_from(*t).unwrap();
                buf[DYN + 2 * i + 1] = *v;
            }
            buf[HASH] = 1 | (u64::from(nchain) << 32);
            // Strings at STRS: "\0dlsym\0other\0".
            let strs = b"\0dlsym\0other\0\0\0\0";
            for (k, c) in strs.chunks(8).enumerate() {
                buf[STRS + k] = u64::from_le_bytes(c.try_into().unwrap());
            }
            // Symbols: 0 null; 1 "dlsym" hidden version at 0x100; 2 "dlsym" default at 0x200;
            // 3 "other" at 0x300.
            let sym = |name: u32, value: u64| -> [u64; 3] {
                let info = u64::from(STT_FUNC);
                [u64::from(name) | (info << 32) | (7 << 48), value, 8]
            };
            for (i, s) in [[0; 3], sym(1, 0x100), sym(1, 0x200), sym(7, 0x300)]
                .iter()
                .enumerate()
            {
                buf[SYMS + 3 * i..SYMS + 3 * i + 3].copy_from_slice(s);
            }
            buf[VERS] = 0x0001_0002_8002_0000; // versym[1] hidden, [2] and [3] default
            Fake { buf }
        }

        fn image(&self) -> Image {
            let base = self.buf.as_ptr() as u64;
            let ph = libc::Elf64_Phdr {
                p_type: libc::PT_LOAD,
                p_flags: libc::PF_R,
                p_offset: 0,
                p_vaddr: 0,
                p_paddr: 0,
                p_filesz: self.buf.len() as u64 * 8,
                p_memsz: self.buf.len() as u64 * 8,
                p_align: 8,
            };
            Image::new(base, &[ph]).0
        }

        fn find(&self, name: &[u8]) -> u64 {
            let img = self.image();
            let dynamic = self.buf.as_ptr() as u64;
            let p = lookup(&img, dynamic, name) as u64;
            if p == 0 {
                0
            } else {
                p - img.base
            }
        }
    }

    #[test]
    fn finds_the_default_version_and_skips_hidden_ones() {
        let f = Fake::new(4, STRS as u64 * 8);
        assert_eq!(f.find(b"dlsym"), 0x200);
        assert_eq!(f.find(b"other"), 0x300);
        assert_eq!(f.find(b"dlsy"), 0, "a prefix is not the name");
        assert_eq!(f.find(b"missing"), 0);
    }

    #[test]
    fn lying_tables_end_the_lookup_instead_of_reading_elsewhere() {
        // A symbol count far past the table: reads stop at the segment's end.
        let f = Fake::new(u32::MAX, STRS as u64 * 8);
        assert_eq!(f.find(b"other"), 0x300);
        assert_eq!(f.find(b"missing"), 0);
        // A string table outside every segment: nothing matches, nothing is read there.
        let f = Fake::new(4, 1 << 40);
        assert_eq!(f.find(b"dlsym"), 0);
        // A dynamic section outside every segment.
        let img = Fake::new(4, STRS as u64 * 8).image();
        assert!(lookup(&img, 8, b"dlsym").is_null());
        assert!(!img.readable(u64::MAX - 2, 8), "no wrap-around");
    }

    #[test]
    fn finds_glibcs_own_functions() {
        for name in [&b"dlsym"[..], b"dlvsym", b"getpid"] {
            let name: &'static [u8] = name;
            let p = glibc_symbol(name);
            assert!(!p.is_null(), "{}", String::from_utf8_lossy(name));
            // SAFETY: an all-zero Dl_info is valid; dladdr fills it for a mapped address.
            let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
            // SAFETY: `p` is an address in a loaded object; `info` is a valid out-pointer.
            assert_ne!(unsafe { libc::dladdr(p, &mut info) }, 0);
            // SAFETY: dladdr set both to NUL-terminated strings of the loader, or null.
            let (file, sym) = unsafe {
                (
                    CStr::from_ptr(info.dli_fname)
                        .to_string_lossy()
                        .into_owned(),
                    CStr::from_ptr(info.dli_sname).to_bytes().to_vec(),
                )
            };
            assert!(
                file.contains("libc.so") || file.contains("libdl.so"),
                "{file}"
            );
            // The loader may name an alias (`__getpid`, `___dlsym`) of the same address.
            assert!(
                sym.ends_with(name),
                "{file}: {}",
                String::from_utf8_lossy(&sym)
            );
        }
    }
}
