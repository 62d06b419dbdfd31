//! The only load-time work: if (and only if) a standalone cap is requested by environment and
//! no standalone id is inherited yet, mark this process as the top of the standalone group by
//! setting `GPUSLICE_STANDALONE_ID=<pid>-<start time>` while the process is still
//! single-threaded, so children share its region. Everything else is lazy.

use std::path::PathBuf;
use std::sync::Mutex;

/// `<pid>-<start time>` of this process.
pub fn own_id() -> String {
    let start = gpuslice_region::liveness::self_start_time().unwrap_or(0);
    format!("{}-{start}", std::process::id())
}

/// Whether `id` names this process.
pub fn is_top(id: &str) -> bool {
    id == own_id()
}

static TO_REMOVE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Removes the standalone directory when this (top) process exits.
pub fn remove_at_exit(dir: PathBuf) {
    if let Ok(mut g) = TO_REMOVE.lock() {
        *g = Some(dir);
    }
    // SAFETY: registers a plain extern "C" handler.
    unsafe {
        libc::atexit(remove_dir);
    }
}

extern "C" fn remove_dir() {
    if let Ok(g) = TO_REMOVE.lock() {
        if let Some(d) = g.as_ref() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn has(name: &std::ffi::CStr) -> bool {
    // SAFETY: getenv with a valid NUL-terminated name; only checked for null.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    !p.is_null() && unsafe { *p } != 0
}

extern "C" fn on_load() {
    if has(c"GPUSLICE_STANDALONE_ID") || has(c"GPUSLICE_SLICE_DIR") {
        return;
    }
    if !has(c"GPUSLICE_MEMORY") && !has(c"CUDA_DEVICE_MEMORY_LIMIT") {
        return;
    }
    let id = own_id();
    if let Ok(c) = std::ffi::CString::new(id) {
        // SAFETY: constructors of a preloaded library run before main, single-threaded.
        unsafe {
            libc::setenv(c"GPUSLICE_STANDALONE_ID".as_ptr(), c.as_ptr(), 0);
        }
    }
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
