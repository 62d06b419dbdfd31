//! Errors of the region crate.

use std::path::PathBuf;

/// Why a slice file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// The file could not be opened, created or mapped.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file exists but is not a valid slice file of this layout version.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Every process record of the usage file is taken by a live process.
    #[error("all {0} process records of the slice are in use")]
    Full(usize),
    /// A device index beyond the slice's devices.
    #[error("device {0} is not part of the slice")]
    NoDevice(usize),
}

impl RegionError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        RegionError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
