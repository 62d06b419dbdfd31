//! One row of `gpuslice doctor`'s report and its verdict: the type every check returns, at the
//! bottom of the folder so the checks (`live`, `owners`) and the report (`mod.rs`) share it
//! without importing each other.

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Fine.
    Ok,
    /// Works, but something is missing or odd.
    Warn,
    /// Broken: containers will not get slices.
    Fail,
}

impl Level {
    pub(super) fn word(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        }
    }
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked (`nvml`, `arbiter`, …).
    pub name: &'static str,
    /// The verdict.
    pub level: Level,
    /// What was found.
    pub detail: String,
    /// The command that fixes it (problems only).
    pub fix: Option<String>,
}

impl Check {
    pub(crate) fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            level: Level::Ok,
            detail: detail.into(),
            fix: None,
        }
    }
    pub(crate) fn bad(
        name: &'static str,
        level: Level,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            name,
            level,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}
