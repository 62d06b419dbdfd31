//! Slice requests, the arbiter control protocol and configuration (being written).
