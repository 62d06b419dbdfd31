//! Error messages where the engine looks for them: stderr, and the low-level runtime's `--log`
//! file in runc's format (`--log-format json`: one `{"level","msg","time"}` object per line,
//! which containerd quotes when a create fails; otherwise logrus text).

use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// RFC 3339 UTC timestamp with nanoseconds (`2026-11-29T10:01:02.123456789Z`).
pub fn rfc3339_now() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(d.as_secs() as i64, d.subsec_nanos())
}

/// Formats seconds since the epoch (UTC).
pub fn rfc3339(secs: i64, nanos: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// One log line in runc's format.
pub fn format_line(level: &str, msg: &str, json: bool) -> String {
    let time = rfc3339_now();
    if json {
        serde_json::json!({"level": level, "msg": msg, "time": time}).to_string()
    } else {
        format!(
            "time=\"{time}\" level={level} msg={}",
            serde_json::Value::from(msg)
        )
    }
}

/// Appends one line to the log file (best effort: a log that cannot be written must not hide
/// the error, which also goes to stderr).
pub fn append(path: &Path, level: &str, msg: &str, json: bool) {
    if let Ok(mut f) = std::fs::File::options()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{}", format_line(level, msg, json));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_lines() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.000000005Z");
        assert_eq!(rfc3339(1_795_000_000, 0), "2026-11-18T11:06:40.000000000Z");
        let l = format_line("error", "a \"b\"", true);
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["level"], "error");
        assert_eq!(v["msg"], "a \"b\"");
        assert!(format_line("warning", "x y", false).contains("level=warning msg=\"x y\""));
    }
}
