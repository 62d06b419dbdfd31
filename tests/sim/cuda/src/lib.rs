//! Simulated libcuda.so.1.
