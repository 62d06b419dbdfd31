//! `gpuslice_oci::loadable` over fixture root filesystems built from the host's own libraries:
//! an image that provides what the "interposer" (this test binary, a real glibc-linked ELF)
//! needs loads; a libc whose newest needed version is renamed away, a missing libc, a missing
//! library, another architecture and a hostile symbolic link are refused or contained, each with
//! a message naming the cause.

use gpuslice_oci::elf_versions::{minimal_elf, version_needs, GlibcVersion};
use gpuslice_oci::loadable::{check, LoadError, Verdict};
use gpuslice_test_support::Scratch;
use std::path::{Path, PathBuf};

const HOST_DIRS: [&str; 3] = ["/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"];

fn me() -> PathBuf {
    std::env::current_exe().unwrap()
}

fn host_lib(soname: &str) -> PathBuf {
    HOST_DIRS
        .iter()
        .map(|d| Path::new(d).join(soname))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{soname} on the host"))
}

/// A merged-/usr root (`lib` -> `usr/lib`) holding every library this binary needs versions
/// from, copied from the host.
fn image(tag: &str) -> Scratch {
    let root = Scratch::new(tag);
    let dir = root.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink("usr/lib", root.join("lib")).unwrap();
    let needs = version_needs(&std::fs::read(me()).unwrap()).unwrap();
    for n in &needs {
        let to = dir.join(&n.file);
        if !to.exists() {
            std::fs::copy(host_lib(&n.file), &to).unwrap();
        }
    }
    root
}

/// The newest glibc version this binary needs from libc.so.6.
fn newest_need() -> String {
    let needs = version_needs(&std::fs::read(me()).unwrap()).unwrap();
    needs
        .iter()
        .filter(|n| n.file == "libc.so.6")
        .max_by_key(|n| GlibcVersion::parse(&n.version))
        .map(|n| n.version.clone())
        .unwrap()
}

/// Replaces every occurrence of `from` by `to` (same length) in `file`.
fn patch(file: &Path, from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let mut b = std::fs::read(file).unwrap();
    let mut hits = 0;
    let mut i = 0;
    while i + from.len() <= b.len() {
        if &b[i..i + from.len()] == from {
            b[i..i + from.len()].copy_from_slice(to);
            hits += 1;
        }
        i += 1;
    }
    assert!(hits > 0, "{} holds no {:?}", file.display(), from);
    std::fs::write(file, b).unwrap();
}

#[test]
fn an_image_with_the_needed_glibc_loads() {
    let root = image("ok");
    match check(&root, &me()).unwrap() {
        Verdict::Loads(Some(v)) => assert!(v >= GlibcVersion(2, 17), "{v}"),
        v => panic!("{v:?}"),
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn an_empty_root_is_not_decided_yet() {
    let root = Scratch::new("empty");
    assert_eq!(check(&root, &me()).unwrap(), Verdict::NotMounted);
    assert_eq!(
        check(&root.join("absent"), &me()).unwrap(),
        Verdict::NotMounted
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn an_older_glibc_is_refused_naming_the_version_and_the_floor() {
    let root = image("old");
    let need = newest_need();
    // The image's libc no longer defines that version: as if it were the release before it.
    let renamed = need.replacen("GLIBC_2.", "GLIBC_0.", 1);
    patch(
        &root.join("lib/x86_64-linux-gnu/libc.so.6"),
        need.as_bytes(),
        renamed.as_bytes(),
    );
    let e = check(&root, &me()).unwrap_err();
    assert!(matches!(e, LoadError::TooOld { .. }), "{e:?}");
    let m = e.to_string();
    assert!(m.contains(&format!("lacks {need} (")), "{m}");
    assert!(m.contains("gpuslice's floor is glibc 2.17"), "{m}");
    assert!(
        m.starts_with(
            "the image's glibc (/lib/x86_64-linux-gnu/libc.so.6, symbol versions up to GLIBC_2."
        ),
        "{m}"
    );
    assert!(!m.contains(root.to_str().unwrap()), "host path leaked: {m}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_static_or_musl_image_is_refused() {
    let root = Scratch::new("static");
    std::fs::create_dir_all(root.join("lib")).unwrap();
    std::fs::write(root.join("lib/ld-musl-x86_64.so.1"), minimal_elf(62)).unwrap();
    let e = check(&root, &me()).unwrap_err();
    assert!(matches!(e, LoadError::NoGlibc), "{e:?}");
    assert!(e.to_string().contains("has no glibc"), "{e}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_missing_library_and_another_architecture_are_refused() {
    let needs = version_needs(&std::fs::read(me()).unwrap()).unwrap();
    if let Some(other) = needs.iter().find(|n| n.file != "libc.so.6") {
        let root = image("missing");
        std::fs::remove_file(root.join("usr/lib/x86_64-linux-gnu").join(&other.file)).unwrap();
        let e = check(&root, &me()).unwrap_err();
        assert!(matches!(e, LoadError::MissingLibrary { .. }), "{e:?}");
        assert!(
            e.to_string().contains(&format!("lacks {}", other.file)),
            "{e}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
    let root = Scratch::new("arch");
    std::fs::create_dir_all(root.join("lib64")).unwrap();
    std::fs::write(root.join("lib64/libc.so.6"), minimal_elf(183)).unwrap();
    let e = check(&root, &me()).unwrap_err().to_string();
    assert!(
        e.contains("/lib64/libc.so.6 in the image is for ELF machine 183"),
        "{e}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn unreadable_interposer_and_garbage_libc_are_named() {
    let root = Scratch::new("garbage");
    std::fs::create_dir_all(root.join("lib64")).unwrap();
    std::fs::write(root.join("lib64/libc.so.6"), b"not an elf").unwrap();
    let e = check(&root, &me()).unwrap_err().to_string();
    assert!(
        e.starts_with("/lib64/libc.so.6 in the image: not a readable"),
        "{e}"
    );
    let e = check(&root, &root.join("nope.so")).unwrap_err().to_string();
    assert!(e.starts_with("interposer ") && e.contains("nope.so"), "{e}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// The image points its library directories at the host's (absolute and `..` links): nothing
/// of the host is read, so the image has no glibc.
#[test]
fn symbolic_links_stay_inside_the_root() {
    let root = Scratch::new("links");
    std::fs::create_dir_all(root.join("usr/lib")).unwrap();
    std::os::unix::fs::symlink("/../../../../lib/x86_64-linux-gnu", root.join("lib64")).unwrap();
    std::os::unix::fs::symlink("../../../../../../lib64", root.join("usr/lib64")).unwrap();
    std::os::unix::fs::symlink("loop", root.join("lib")).unwrap();
    let e = check(&root, &me()).unwrap_err();
    assert!(matches!(e, LoadError::NoGlibc), "{e:?}");
    std::fs::remove_dir_all(&root).unwrap();
}
