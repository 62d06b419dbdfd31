//! Persisted slice records: `<state-dir>/<slice-id>/slice.json`, written atomically (temp file +
//! rename) after every admit and update, removed with the directory on release, and read back on
//! start so the arbiter survives its own restart.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use gpuslice_api::protocol::valid_slice_id;
use gpuslice_api::SliceStatus;
use serde::{Deserialize, Serialize};

/// The record's file name inside a slice directory.
pub const RECORD_FILE: &str = "slice.json";
/// Version of the record format.
pub const RECORD_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Record {
    version: u32,
    #[serde(flatten)]
    slice: SliceStatus,
}

/// The state directory's slice records.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the state directory and makes it mode 0700: only its owner
    /// (root, or the arbiter's own user) may reach the socket and the slice directories. A
    /// container reaches its slice through the bind mount the runtime made, a `gpuslice run`
    /// command through its own mount namespace (`docs/threat-model.md`, G14).
    pub fn open(root: &Path) -> io::Result<Store> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)?;
        fs::set_permissions(root, fs::Permissions::from_mode(0o700))?;
        Ok(Store {
            root: root.to_path_buf(),
        })
    }

    /// The state directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A slice's directory (whether or not it exists).
    pub fn slice_dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// Writes (or replaces) a slice's record, creating its directory.
    pub fn save(&self, slice: &SliceStatus) -> io::Result<()> {
        if !valid_slice_id(&slice.slice_id) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "invalid slice id",
            ));
        }
        let dir = self.slice_dir(&slice.slice_id);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)?;
        let body = serde_json::to_vec_pretty(&Record {
            version: RECORD_VERSION,
            slice: slice.clone(),
        })
        .map_err(io::Error::other)?;
        write_private(&dir, RECORD_FILE, &body)
    }

    /// Removes a slice's directory and everything in it. A missing directory is not an error.
    pub fn remove(&self, id: &str) -> io::Result<()> {
        if !valid_slice_id(id) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "invalid slice id",
            ));
        }
        match fs::remove_dir_all(self.slice_dir(id)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Every readable record, plus a message for each directory whose record is unreadable.
    /// Directories without a record (not slices) are skipped silently.
    pub fn load_all(&self) -> io::Result<(Vec<SliceStatus>, Vec<String>)> {
        let mut slices = Vec::new();
        let mut problems = Vec::new();
        let mut entries: Vec<_> = fs::read_dir(&self.root)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path().join(RECORD_FILE);
            let name = entry.file_name().to_string_lossy().into_owned();
            if !entry.file_type().map(|t| t.is_dir()).unwrap_or(false) || !path.exists() {
                continue;
            }
            let parsed = fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<Record>(&b).map_err(|e| e.to_string()));
            match parsed {
                Ok(r) if r.version != RECORD_VERSION => problems.push(format!(
                    "{}: record version {} (expected {RECORD_VERSION})",
                    path.display(),
                    r.version
                )),
                Ok(r) if r.slice.slice_id != name => problems.push(format!(
                    "{}: record names slice \"{}\"",
                    path.display(),
                    r.slice.slice_id
                )),
                Ok(r) => slices.push(r.slice),
                Err(e) => problems.push(format!("{}: {e}", path.display())),
            }
        }
        Ok((slices, problems))
    }
}

pub use gpuslice_admission::files::write_private;
