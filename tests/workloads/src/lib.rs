//! Workload clients for gpuslice tests, benchmarks and the demo. They drive the CUDA driver API the
//! ways real programs do — linked directly, through `dlopen` + `dlsym`, and through
//! `cuGetProcAddress_v2` as the CUDA 12 runtime does — from several threads and processes, with
//! saturating and bursty launch patterns, and read NVML through `nvml-wrapper`.

pub mod capture;
pub mod cli;
pub mod driver;
pub mod nvml_view;
pub mod quantity;
pub mod serve;
pub mod session;
pub mod stats;
