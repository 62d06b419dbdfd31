//! How the host tells a process that runs under the interposer from one that does not: its
//! `/proc/<pid>/maps` maps a file named `libgpuslice.so`. Used by the arbiter (a CUDA process
//! without it marks its device foreign-owned) and `gpuslice doctor`'s `gpu-owners` row.
//!
//! Not proof: a process may map any file under that name. A process that fakes it only keeps
//! its own device open to slices (it loses the protection a foreign-owned device has); the
//! backstop still judges every process it attributes to a slice.

/// The interposer's file name.
pub const LIBRARY: &str = "libgpuslice.so";

/// Whether `/proc/<pid>/maps` text `maps` maps a file named [`LIBRARY`].
pub fn maps_interposer(maps: &str) -> bool {
    maps.lines().any(|l| {
        l.split_whitespace()
            .nth(5)
            .and_then(|p| p.rsplit('/').next())
            .is_some_and(|n| n == LIBRARY)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_mapped_libgpuslice_counts() {
        let with = "7f00-7f10 r-xp 00000000 08:01 42 /opt/gpuslice/lib/gpuslice/libgpuslice.so\n";
        assert!(maps_interposer(with));
        let without = "7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/libcuda.so.1\n\
                       7f20-7f30 rw-p 00000000 00:00 0 \n";
        assert!(!maps_interposer(without));
        // A name that only contains it, or a path in another column, is not the interposer.
        assert!(!maps_interposer(
            "7f00-7f10 r-xp 00000000 08:01 42 /tmp/libgpuslice.so.evil\n"
        ));
        assert!(!maps_interposer(""));
    }
}
