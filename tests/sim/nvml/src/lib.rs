//! Simulated `libnvidia-ml.so.1`: the NVML C API with real names, signatures and return codes,
//! answering from the simulated node's ground truth (`gpuslice-sim-core`): per-process memory,
//! engine utilisation, process samples, per host PID. A test double; no product links it.

mod device;
mod state;
mod system;
mod types;
