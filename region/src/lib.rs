//! The shared-memory ABI of a slice directory (issue #3 / #4).
