//! Workload clients.
