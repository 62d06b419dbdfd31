//! gpuslice-kubelet-plugin

pub mod proto;
