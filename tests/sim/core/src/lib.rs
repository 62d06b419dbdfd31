//! Simulated GPU node ground truth.
