//! Finds glibc's own `dlsym` / `dlvsym` by reading the dynamic symbol tables of the loaded C
//! library (`dl_iterate_phdr`), because this library exports both names itself: any ordinary
//! reference to them, even a versioned one, would bind back to our overrides.

use std::ffi::{c_int, c_void, CStr};

const PT_DYNAMIC: u32 = 2;
const DT_NULL: i64 = 0;
const DT_HASH: i64 = 4;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;

#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

#[repr(C)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
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
    if info.dlpi_name.is_null() {
        return 0;
    }
    // SAFETY: dlpi_name is a NUL-terminated string owned by the dynamic linker.
    let obj = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
    let file = obj.rsplit(|&b| b == b'/').next().unwrap_or(obj);
    if !(file.starts_with(b"libc.so") || file.starts_with(b"libdl.so")) {
        return 0;
    }
    // SAFETY: the phdrs and the dynamic section of a loaded object are mapped and readable.
    let found = unsafe { lookup(info, q.name) };
    if !found.is_null() {
        q.found = found;
        return 1;
    }
    0
}

unsafe fn lookup(info: &libc::dl_phdr_info, name: &[u8]) -> *mut c_void {
    let base = info.dlpi_addr;
    let mut dynamic: *const Dyn = std::ptr::null();
    for i in 0..usize::from(info.dlpi_phnum) {
        // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type == PT_DYNAMIC {
            dynamic = (base + ph.p_vaddr) as *const Dyn;
        }
    }
    if dynamic.is_null() {
        return std::ptr::null_mut();
    }
    let fix = |v: u64| if v < base { v + base } else { v };
    let (mut strtab, mut symtab, mut hash, mut gnu_hash, mut versym) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut d = dynamic;
    loop {
        // SAFETY: the dynamic section is an array terminated by DT_NULL.
        let e = unsafe { &*d };
        match e.tag {
            DT_NULL => break,
            DT_STRTAB => strtab = fix(e.val),
            DT_SYMTAB => symtab = fix(e.val),
            DT_HASH => hash = fix(e.val),
            DT_GNU_HASH => gnu_hash = fix(e.val),
            DT_VERSYM => versym = fix(e.val),
            _ => {}
        }
        // SAFETY: still inside the DT_NULL-terminated array.
        d = unsafe { d.add(1) };
    }
    if strtab == 0 || symtab == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: hash tables of a loaded object are mapped; layouts per the ELF / GNU specs.
    let count = unsafe {
        if hash != 0 {
            *(hash as *const u32).add(1) as usize
        } else if gnu_hash != 0 {
            gnu_symbol_count(gnu_hash as *const u32)
        } else {
            return std::ptr::null_mut();
        }
    };
    for i in 0..count {
        // SAFETY: i < number of symbols in the table.
        let s = unsafe { &*(symtab as *const Sym).add(i) };
        if s.shndx == 0 || s.value == 0 || (s.info & 0xf) != 2 {
            continue; // undefined or not a function
        }
        // SAFETY: st_name is an offset into the NUL-terminated string table.
        let n = unsafe { CStr::from_ptr((strtab + u64::from(s.name)) as *const libc::c_char) };
        if n.to_bytes() != name {
            continue;
        }
        if versym != 0 {
            // SAFETY: DT_VERSYM has one u16 per symbol.
            let v = unsafe { *(versym as *const u16).add(i) };
            if v & 0x8000 != 0 {
                continue; // a hidden (non-default) version, e.g. dlsym@GLIBC_2.2.5 on 2.34+
            }
        }
        return (base + s.value) as *mut c_void;
    }
    std::ptr::null_mut()
}

unsafe fn gnu_symbol_count(gh: *const u32) -> usize {
    // SAFETY: caller passes a mapped DT_GNU_HASH table.
    unsafe {
        let nbuckets = *gh as usize;
        let symoffset = *gh.add(1) as usize;
        let bloom_size = *gh.add(2) as usize;
        let buckets = gh.add(4 + bloom_size * 2);
        let chain = buckets.add(nbuckets);
        let mut max = 0usize;
        for i in 0..nbuckets {
            max = max.max(*buckets.add(i) as usize);
        }
        if max < symoffset {
            return symoffset;
        }
        while *chain.add(max - symoffset) & 1 == 0 {
            max += 1;
        }
        max + 1
    }
}
