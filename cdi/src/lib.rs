//! CDI spec generation for kind `gpuslice.io/gpu`. Empty until issue #6 builds it.
