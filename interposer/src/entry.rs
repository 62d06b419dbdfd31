//! The exported entry points, generated from the one declaration of their C signatures
//! (`gpuslice_cuda_abi::for_each_wrapped!`, with named parameters): `table.rs` runs
//! `for_each_wrapped!(wrappers)`, which writes
//!
//! - `export::<name>`: the `#[no_mangle] extern "C"` shell under the library's name, which does
//!   nothing but call the implementation `imp::<name>` (a plain `unsafe fn` in the module that
//!   owns the behaviour, reached through the `imp` module beside the invocation); a declared
//!   name without an implementation, or one whose signature differs, does not compile;
//! - for a pair `name / name_ptsz`, both shells, calling the one implementation `imp::<name>`
//!   with a [`Twin`] first: which of the two was called, and the real function of that name;
//! - `lookup` (name → shell, what `dlsym` and `cuGetProcAddress` answer with) and `WRAPPED`,
//!   from the same list, so no shell exists without its table entry or the other way round.
//!
//! The shells add one direct call to the implementation and nothing else: no allocation, lock
//! or logging on the way.

/// Which of a legacy / per-thread-stream pair the application called (`cuLaunchKernel` or
/// `cuLaunchKernel_ptsz`, …), and the real driver function of that name (`None` when the driver
/// lacks it). `F` is the pair's function-pointer type (`gpuslice_cuda_abi::pfn::<name>`).
#[derive(Clone, Copy)]
pub struct Twin<F> {
    /// The `_ptsz` export was called (the per-thread default stream).
    pub per_thread: bool,
    /// The real function of the name that was called.
    pub real: Option<F>,
}

/// `forward!(twin; args…)`: calls the real function `twin` carries with the caller's arguments
/// (`CUDA_ERROR_NOT_INITIALIZED` when the driver lacks it).
macro_rules! forward {
    ($twin:expr; $($arg:expr),* $(,)?) => {
        match $twin.real {
            // SAFETY: forwarding the caller's arguments unchanged to the real entry point of the
            // name that was called, whose C signature is the pair's (declared once in abi).
            Some(f) => unsafe { f($($arg),*) },
            None => gpuslice_cuda_abi::result::CUDA_ERROR_NOT_INITIALIZED,
        }
    };
}

/// The callback of `gpuslice_cuda_abi::for_each_wrapped!` (see the module's documentation).
macro_rules! wrappers {
    (
        cuda { $($w:ident $(/ $wt:ident)? ($($wp:tt)*) -> $wr:ty;)* }
        nvml { $($n:ident ($($np:tt)*) -> $nr:ty;)* }
    ) => {
        /// The exported shells: one for each declared function, under its C name.
        pub mod export {
            #![allow(non_snake_case)]
            use gpuslice_cuda_abi::exec::*;
            use gpuslice_cuda_abi::memory::*;
            use gpuslice_cuda_abi::nvml::*;
            use gpuslice_cuda_abi::procaddr::CUdriverProcAddressQueryResult;
            use gpuslice_cuda_abi::result::CUresult;
            use gpuslice_cuda_abi::types::*;
            use std::ffi::{c_char, c_int, c_uint, c_void};

            $(wrappers!(@shell $w [$($wt)?] ($($wp)*) $wr);)*
            $(wrappers!(@shell $n [] ($($np)*) $nr);)*
        }

        /// Our wrapper for the exported symbol `name`, if we wrap it.
        pub fn lookup(name: &[u8]) -> Option<*mut std::ffi::c_void> {
            $(wrappers!(@look name $w [$($wt)?]);)*
            $(wrappers!(@look name $n []);)*
            None
        }

        /// Every symbol we wrap.
        pub const WRAPPED: &[&str] = &[$(stringify!($w), $(stringify!($wt),)?)* $(stringify!($n),)*];
    };
    (@look $name:ident $w:ident [$($wt:ident)?]) => {
        if $name == stringify!($w).as_bytes() {
            return Some(export::$w as *mut std::ffi::c_void);
        }
        $(if $name == stringify!($wt).as_bytes() {
            return Some(export::$wt as *mut std::ffi::c_void);
        })?
    };
    (@shell $w:ident [] ($($p:ident: $t:ty),*) $r:ty) => {
        // The implementation has exactly the declared signature.
        const _: unsafe fn($($t),*) -> $r = super::imp::$w;
        #[doc = concat!("`", stringify!($w), "`, exported: calls our implementation of it.")]
        ///
        /// # Safety
        /// C ABI; same contract as the library's.
        #[no_mangle]
        pub unsafe extern "C" fn $w($($p: $t),*) -> $r {
            // SAFETY: the caller's arguments under the library's contract, which is the
            // implementation's.
            unsafe { super::imp::$w($($p),*) }
        }
    };
    (@shell $w:ident [$wt:ident] ($($p:ident: $t:ty),*) $r:ty) => {
        // The pair's one implementation takes the twin first, then the declared parameters.
        const _: unsafe fn($crate::entry::Twin<gpuslice_cuda_abi::pfn::$w>, $($t),*) -> $r =
            super::imp::$w;
        wrappers!(@twin $w, $w, false, ($($p: $t),*) $r);
        wrappers!(@twin $wt, $w, true, ($($p: $t),*) $r);
    };
    (@twin $name:ident, $imp:ident, $pt:literal, ($($p:ident: $t:ty),*) $r:ty) => {
        #[doc = concat!(
            "`", stringify!($name), "`, exported: calls our implementation of `",
            stringify!($imp), "` and its twin."
        )]
        ///
        /// # Safety
        /// C ABI; same contract as the driver's.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($p: $t),*) -> $r {
            let twin = $crate::entry::Twin {
                per_thread: $pt,
                real: $crate::real!(cuda_sym $name),
            };
            // SAFETY: the caller's arguments under the driver's contract, which is the
            // implementation's.
            unsafe { super::imp::$imp(twin, $($p),*) }
        }
    };
}
