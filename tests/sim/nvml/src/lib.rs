//! Simulated libnvidia-ml.so.1.
