//! `containerd-shim-gpuslice-v2` (`runtime_type = "io.containerd.gpuslice.v2"`): a thin ttrpc
//! proxy in front of the distribution's `containerd-shim-runc-v2`. `start` runs runc-v2's own
//! `start` with the same arguments, then puts our server ([`proxy`]) in front of the socket it
//! announced ([`reply`]); every Task call is forwarded byte for byte, except `Create`, where the
//! bundle is prepared first (`gpuslice_oci::prepare_bundle`). Which runc-v2 runs: [`upstream`].
//! Reference: `docs/shim.md`.

pub mod proxy;
pub mod reply;
pub mod start;
pub mod upstream;
