//! `driver_root::locate` over the node layouts the Kubernetes node agent meets, each built as a
//! fake root (files, symlinks and a loader cache as the distribution's ldconfig lists it):
//! Debian 12 (driver packages through /etc/alternatives), Ubuntu (merged /usr, NVIDIA's
//! packages), RHEL 8 (compat-format cache) / RHEL 9 / Amazon Linux 2023 (`lib64`), COS (driver
//! outside the loader cache) and a GPU Operator driver container; then the paths that must not
//! escape the root.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use gpuslice_cdi::driver_root::{locate, resolve_in_root, NVML};
use gpuslice_cdi::ldcache;

/// glibc's flags of a 64-bit library of this machine (FLAG_ELF_LIBC6 | the arch's bits).
const NATIVE: i32 = if cfg!(target_arch = "aarch64") {
    0x0a03
} else {
    0x0303
};
/// A 32-bit library (i386 / i686: FLAG_ELF_LIBC6, no arch bits).
const LIB32: i32 = 0x0003;

struct Root(PathBuf);

impl Root {
    fn new(name: &str) -> Root {
        let p = std::env::temp_dir().join(format!("gs-driver-root-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Root(p)
    }
    fn at(&self, abs: &str) -> PathBuf {
        self.0.join(abs.trim_start_matches('/'))
    }
    fn file(&self, abs: &str) -> &Self {
        let p = self.at(abs);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"\x7fELF").unwrap();
        self
    }
    fn link(&self, abs: &str, target: &str) -> &Self {
        let p = self.at(abs);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink(target, &p).unwrap();
        self
    }
    fn cache(&self, entries: &[(&str, &str, i32)]) -> &Self {
        self.cache_bytes(ldcache::encode(entries))
    }
    fn cache_bytes(&self, bytes: Vec<u8>) -> &Self {
        let p = self.at("/etc/ld.so.cache");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
        self
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The compat layout glibc before 2.32 writes by default (RHEL 8): an "ld.so-1.7.0" table,
/// then the new one aligned to 8.
fn compat(new: Vec<u8>, old_entries: u32) -> Vec<u8> {
    let mut img = b"ld.so-1.7.0\0".to_vec();
    img.extend_from_slice(&old_entries.to_ne_bytes());
    img.extend(std::iter::repeat_n(0u8, 12 * old_entries as usize));
    while !img.len().is_multiple_of(8) {
        img.push(0);
    }
    img.extend(new);
    img
}

#[test]
fn debian_12_follows_the_alternatives_links_inside_the_root() {
    // nvidia-driver 535 from Debian: libnvidia-ml.so.1 -> /etc/alternatives/… (absolute) ->
    // /usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1 (absolute) -> the versioned file.
    let r = Root::new("debian");
    let multiarch = "/usr/lib/x86_64-linux-gnu";
    let alt = "/etc/alternatives/nvidia--libnvidia-ml.so.1-x86_64-linux-gnu";
    r.file(&format!(
        "{multiarch}/nvidia/current/libnvidia-ml.so.535.216.01"
    ))
    .link(
        &format!("{multiarch}/nvidia/current/libnvidia-ml.so.1"),
        "libnvidia-ml.so.535.216.01",
    )
    .link(
        alt,
        &format!("{multiarch}/nvidia/current/libnvidia-ml.so.1"),
    )
    .link(&format!("{multiarch}/libnvidia-ml.so.1"), alt)
    .file("/usr/lib/i386-linux-gnu/libnvidia-ml.so.1")
    .cache(&[
        // The 32-bit one first: never chosen by a 64-bit agent.
        (NVML, "/usr/lib/i386-linux-gnu/libnvidia-ml.so.1", LIB32),
        (NVML, &format!("{multiarch}/libnvidia-ml.so.1"), NATIVE),
        ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", NATIVE),
    ]);
    assert_eq!(
        locate(r.path(), NVML).unwrap(),
        r.at(&format!(
            "{multiarch}/nvidia/current/libnvidia-ml.so.535.216.01"
        ))
    );
}

#[test]
fn ubuntu_merged_usr_resolves_the_lib_directory_link() {
    // Ubuntu 22.04 with NVIDIA's packages: /lib -> usr/lib, and ldconfig lists the /lib path.
    let r = Root::new("ubuntu");
    r.link("/lib", "usr/lib")
        .file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15")
        .link(
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "libnvidia-ml.so.550.54.15",
        )
        .cache(&[(NVML, "/lib/x86_64-linux-gnu/libnvidia-ml.so.1", NATIVE)]);
    assert_eq!(
        locate(r.path(), NVML).unwrap(),
        r.at("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15")
    );
}

/// RHEL 9 and Amazon Linux 2023 (NVIDIA's RPMs): `lib64`, `/lib64 -> usr/lib64`, the i686
/// package beside it in `/usr/lib`.
fn rhel_like(name: &str) -> Root {
    let r = Root::new(name);
    r.link("/lib64", "usr/lib64")
        .file("/usr/lib64/libnvidia-ml.so.570.86.15")
        .link("/usr/lib64/libnvidia-ml.so.1", "libnvidia-ml.so.570.86.15")
        .file("/usr/lib/libnvidia-ml.so.1");
    r
}

#[test]
fn rhel_9_and_al2023_find_lib64() {
    for name in ["rhel9", "al2023"] {
        let r = rhel_like(name);
        r.cache(&[
            (NVML, "/usr/lib/libnvidia-ml.so.1", LIB32),
            (NVML, "/lib64/libnvidia-ml.so.1", NATIVE),
        ]);
        assert_eq!(
            locate(r.path(), NVML).unwrap(),
            r.at("/usr/lib64/libnvidia-ml.so.570.86.15"),
            "{name}"
        );
    }
}

#[test]
fn rhel_8_reads_the_compat_format_cache() {
    let r = rhel_like("rhel8");
    r.cache_bytes(compat(
        ldcache::encode(&[(NVML, "/usr/lib64/libnvidia-ml.so.1", NATIVE)]),
        3,
    ));
    assert_eq!(
        locate(r.path(), NVML).unwrap(),
        r.at("/usr/lib64/libnvidia-ml.so.570.86.15")
    );
}

#[test]
fn cos_finds_the_driver_outside_the_loader_cache() {
    // Container-Optimized OS: the GKE installer puts the driver in
    // /home/kubernetes/bin/nvidia/lib64; the node's loader cache has only the OS's libraries.
    let r = Root::new("cos");
    r.file("/home/kubernetes/bin/nvidia/lib64/libnvidia-ml.so.535.183.01")
        .link(
            "/home/kubernetes/bin/nvidia/lib64/libnvidia-ml.so.1",
            "libnvidia-ml.so.535.183.01",
        )
        .file("/lib64/libc.so.6")
        .cache(&[("libc.so.6", "/lib64/libc.so.6", NATIVE)]);
    assert_eq!(
        locate(r.path(), NVML).unwrap(),
        r.at("/home/kubernetes/bin/nvidia/lib64/libnvidia-ml.so.535.183.01")
    );
}

#[test]
fn a_gpu_operator_driver_container_root_is_searched_when_the_node_has_no_driver() {
    // The Operator's driver container mounts its root at /run/nvidia/driver; the node's own
    // loader cache does not know it.
    let r = Root::new("operator");
    r.file("/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.127.05")
        .link(
            "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "libnvidia-ml.so.550.127.05",
        )
        .cache(&[]);
    assert_eq!(
        locate(r.path(), NVML).unwrap(),
        r.at("/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.127.05")
    );
}

#[test]
fn a_stale_cache_entry_falls_back_to_the_directories() {
    // Driver upgraded, ldconfig not rerun: the cache names a file that is gone.
    let r = rhel_like("stale");
    r.cache(&[(NVML, "/usr/lib64/nvidia-old/libnvidia-ml.so.1", NATIVE)]);
    assert_eq!(
        locate(r.path(), NVML).unwrap(),
        r.at("/usr/lib64/libnvidia-ml.so.570.86.15")
    );
}

#[test]
fn nothing_found_names_the_root_the_cache_and_the_fix() {
    let r = Root::new("none");
    let err = locate(r.path(), NVML).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "{NVML} not found under driver root {}",
            r.path().display()
        )),
        "{err}"
    );
    assert!(err.contains("etc/ld.so.cache"), "{err}");
    assert!(err.contains("/home/kubernetes/bin/nvidia/lib64"), "{err}");
    assert!(
        err.contains("GPUSLICE_DRIVER_ROOT") && err.contains("GPUSLICE_NVML_LIBRARY"),
        "{err}"
    );
    // A corrupt cache is reported, and the directories are still searched.
    r.cache_bytes(b"garbage".to_vec());
    let err = locate(r.path(), NVML).unwrap_err().to_string();
    assert!(err.contains("bad magic"), "{err}");
    // Only a 32-bit entry: said so.
    r.file("/usr/lib/libnvidia-ml.so.1")
        .cache(&[(NVML, "/usr/lib/libnvidia-ml.so.1", LIB32)]);
    let err = locate(r.path(), NVML).unwrap_err().to_string();
    assert!(err.contains("has no native entry"), "{err}");
}

#[test]
fn links_never_leave_the_root() {
    let r = Root::new("escape");
    // An absolute target is the node's path, not the container's: /etc/hostname exists here
    // (in the test's own filesystem) but not in the fake node.
    assert!(Path::new("/etc/hostname").exists() || Path::new("/etc/passwd").exists());
    r.link("/usr/lib64/libnvidia-ml.so.1", "/etc/passwd")
        .cache(&[(NVML, "/usr/lib64/libnvidia-ml.so.1", NATIVE)]);
    assert!(resolve_in_root(r.path(), "/usr/lib64/libnvidia-ml.so.1").is_none());
    assert!(locate(r.path(), NVML).is_err());
    // `..` stops at the root.
    r.file("/etc/passwd");
    assert_eq!(
        resolve_in_root(r.path(), "/../../../../etc/passwd").unwrap(),
        r.at("/etc/passwd")
    );
    r.link(
        "/usr/lib/x86_64-linux-gnu/up",
        "../../../../../../../../etc/passwd",
    );
    assert_eq!(
        resolve_in_root(r.path(), "/usr/lib/x86_64-linux-gnu/up").unwrap(),
        r.at("/etc/passwd")
    );
    // A loop ends.
    r.link("/a", "/b").link("/b", "/a");
    assert!(resolve_in_root(r.path(), "/a").is_none());
    // A directory is not a library.
    assert!(resolve_in_root(r.path(), "/usr/lib64").is_none());
}
