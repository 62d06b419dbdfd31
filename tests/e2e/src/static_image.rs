//! An image the interposer cannot load in: no glibc at all, only the distribution's static
//! busybox as `/bin/sh` (what Alpine-less distroless-static or `FROM scratch` images with a
//! static binary look like to the loader check). Named [`STATIC_IMAGE`] and imported into the
//! CRI namespace, for the fail-closed refusal of a container that asks for a slice in it.

use crate::containerd::Containerd;
use crate::cri::import_oci;
use crate::image::{busybox, copy_file, layer_tar, oci_archive_named};
use anyhow::Result;
use std::path::Path;

/// The glibc-less image's name.
pub const STATIC_IMAGE: &str = "localhost/gpuslice-static:latest";

/// Builds the image under `work` and imports it into `ctd`'s CRI namespace.
pub fn import_static_image(ctd: &Containerd, work: &Path) -> Result<()> {
    let root = work.join("static-rootfs");
    for d in ["bin", "etc", "dev", "proc", "sys", "tmp"] {
        std::fs::create_dir_all(root.join(d))?;
    }
    copy_file(&busybox()?, &root.join("bin/busybox"))?;
    for a in ["sh", "sleep"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(a))?;
    }
    let layer = work.join("static-layer.tar");
    layer_tar(&root, &layer)?;
    let oci = work.join("static.oci.tar");
    oci_archive_named(
        &layer,
        &work.join("static-oci"),
        &oci,
        &["/bin/sh"],
        STATIC_IMAGE,
    )?;
    import_oci(ctd, &oci)
}
