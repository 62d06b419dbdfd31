//! libgpuslice.so: not built yet (issue #3). Loading it changes nothing.
