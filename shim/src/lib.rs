//! Spec edits shared by `gpuslice-runtime`, `gpuslice-hook` and `containerd-shim-gpuslice-v2`.
//! Empty until issue #5 builds them.
