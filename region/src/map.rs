//! The one audited place where slice files become Rust references: `mmap(MAP_SHARED)` of a real
//! file, with size, alignment and header checks before any `&T` is handed out.
//!
//! Soundness argument, once for the whole crate: every type mapped here is `#[repr(C)]` and made
//! only of `AtomicU32`/`AtomicU64` (and arrays of them), which are valid for every bit pattern and
//! have interior mutability, so another process writing the file concurrently is an ordinary
//! atomic race, not undefined behaviour. A read-only mapping is only ever reached through views
//! that load (never store), so no write can fault.

use crate::error::RegionError;
use crate::layout::{
    FileHeader, FileKind, LeaseFile, LimitsFile, UsageFile, LAYOUT_VERSION, MAGIC, MAX_DEVICES,
    MAX_PROCS,
};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;

/// A file layout that may be mapped.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, consist only of atomics (valid for any bytes, including
/// all-zero), and start with a [`FileHeader`].
pub unsafe trait FileLayout: Sized + 'static {
    /// The kind recorded in the header.
    const KIND: FileKind;
    /// The header.
    fn header(&self) -> &FileHeader;
    /// Expected `FileHeader::records`.
    const RECORDS: u32 = 0;
}

// SAFETY: `LimitsFile` is #[repr(C)], all atomics, header first.
unsafe impl FileLayout for LimitsFile {
    const KIND: FileKind = FileKind::Limits;
    fn header(&self) -> &FileHeader {
        &self.header
    }
}
// SAFETY: `LeaseFile` is #[repr(C)], all atomics, header first.
unsafe impl FileLayout for LeaseFile {
    const KIND: FileKind = FileKind::Lease;
    fn header(&self) -> &FileHeader {
        &self.header
    }
}
const _: () = assert!(MAX_PROCS <= u32::MAX as usize);

// SAFETY: `UsageFile` is #[repr(C)], all atomics, header first.
unsafe impl FileLayout for UsageFile {
    const KIND: FileKind = FileKind::Usage;
    // A small constant: the assertion below keeps the cast exact.
    #[allow(clippy::cast_possible_truncation)]
    const RECORDS: u32 = MAX_PROCS as u32;
    fn header(&self) -> &FileHeader {
        &self.header
    }
}

/// A mapped slice file.
pub struct Mapping<T: FileLayout> {
    ptr: NonNull<T>,
    writable: bool,
    /// Slot in the SIGBUS guard (`usage` mappings: the tenant may truncate that file).
    guard: Option<usize>,
}

// SAFETY: the mapped memory is only accessed through atomics (see the module doc), so sharing
// and sending the mapping between threads is as safe as sharing a `&T` of atomics.
unsafe impl<T: FileLayout> Send for Mapping<T> {}
// SAFETY: as above.
unsafe impl<T: FileLayout> Sync for Mapping<T> {}

impl<T: FileLayout> std::fmt::Debug for Mapping<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("kind", &T::KIND)
            .field("writable", &self.writable)
            .finish()
    }
}

impl<T: FileLayout> Mapping<T> {
    /// Maps `path`, checking its size, alignment and header.
    pub fn open(path: &Path, writable: bool) -> Result<Self, RegionError> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| RegionError::io(path, e))?;
        let m = Self::map_file(&file, path, writable)?;
        m.validate(path)?;
        Ok(m)
    }

    /// Creates `path` (which must not exist), sized and with a valid header, and maps it
    /// read-write. The caller fills the body and then publishes it (see `files::publish`).
    pub fn create(path: &Path) -> Result<Self, RegionError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| RegionError::io(path, e))?;
        file.set_len(std::mem::size_of::<T>() as u64)
            .map_err(|e| RegionError::io(path, e))?;
        let m = Self::map_file(&file, path, true)?;
        let h = m.get().header();
        h.kind.store(T::KIND as u32, Relaxed);
        h.version.store(LAYOUT_VERSION, Relaxed);
        let small = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        h.header_size
            .store(small(std::mem::size_of::<FileHeader>()), Relaxed);
        h.max_devices.store(small(MAX_DEVICES), Relaxed);
        h.file_size.store(std::mem::size_of::<T>() as u64, Relaxed);
        h.records.store(T::RECORDS, Relaxed);
        h.magic.store(MAGIC, std::sync::atomic::Ordering::Release);
        Ok(m)
    }

    fn map_file(file: &File, path: &Path, writable: bool) -> Result<Self, RegionError> {
        let want = std::mem::size_of::<T>();
        let len = file.metadata().map_err(|e| RegionError::io(path, e))?.len();
        if len != want as u64 {
            return Err(RegionError::Invalid {
                path: path.to_path_buf(),
                reason: format!("size is {len} bytes, layout v{LAYOUT_VERSION} needs {want}"),
            });
        }
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh mapping of `want` bytes of an open file descriptor; we pass no address
        // hint, so no existing mapping is replaced. The fd may be closed after mmap returns.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                want,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(RegionError::io(path, std::io::Error::last_os_error()));
        }
        let Some(ptr) = NonNull::new(p.cast::<T>()) else {
            return Err(RegionError::Invalid {
                path: path.to_path_buf(),
                reason: "mmap returned null".into(),
            });
        };
        let guard = match T::KIND {
            FileKind::Usage => crate::sigbus::register(p as usize, want),
            _ => None,
        };
        let m = Mapping {
            ptr,
            writable,
            guard,
        };
        if !(p as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(RegionError::Invalid {
                path: path.to_path_buf(),
                reason: "mapping is misaligned".into(),
            });
        }
        Ok(m)
    }

    fn validate(&self, path: &Path) -> Result<(), RegionError> {
        let h = self.get().header();
        let bad = |reason: String| {
            Err(RegionError::Invalid {
                path: path.to_path_buf(),
                reason,
            })
        };
        if h.magic.load(std::sync::atomic::Ordering::Acquire) != MAGIC {
            return bad("bad magic (not a gpuslice file)".into());
        }
        let version = h.version.load(Relaxed);
        if version != LAYOUT_VERSION {
            return bad(format!(
                "layout version {version}, this build reads {LAYOUT_VERSION}"
            ));
        }
        let kind = h.kind.load(Relaxed);
        if kind != T::KIND as u32 {
            return bad(format!("file kind {kind}, expected {:?}", T::KIND));
        }
        if h.header_size.load(Relaxed) as usize != std::mem::size_of::<FileHeader>()
            || h.file_size.load(Relaxed) != std::mem::size_of::<T>() as u64
            || h.max_devices.load(Relaxed) as usize != MAX_DEVICES
            || h.records.load(Relaxed) != T::RECORDS
        {
            return bad("header sizes do not match the layout".into());
        }
        Ok(())
    }

    /// The mapped file.
    pub fn get(&self) -> &T {
        // SAFETY: `ptr` is a live, aligned mapping of exactly size_of::<T>() bytes (checked in
        // map_file) that stays mapped until `self` drops; T is all atomics (FileLayout), so
        // concurrent writers elsewhere are atomic accesses, not data races.
        unsafe { self.ptr.as_ref() }
    }

    /// Whether the mapping allows stores.
    pub fn writable(&self) -> bool {
        self.writable
    }
}

impl<T: FileLayout> Drop for Mapping<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.guard {
            crate::sigbus::unregister(slot);
        }
        // SAFETY: unmaps exactly the region mapped in map_file; no reference derived from it
        // outlives `self` (all borrows are tied to `&self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), std::mem::size_of::<T>());
        }
    }
}
