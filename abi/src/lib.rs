//! CUDA driver API / NVML C ABI: types, constants, symbol versions.
