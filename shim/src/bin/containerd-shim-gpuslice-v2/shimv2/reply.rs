//! The answer a shim prints to `shim start`, in the three forms containerd reads: a plain
//! address (shim API v2, containerd 1.6), JSON bootstrap parameters (`{"version":…,"address":…,
//! "protocol":"ttrpc"}`, containerd 1.7+ shims), or a protobuf `BootstrapResult` (the stdin
//! bootstrap protocol). We answer containerd in the form runc-v2 used, with our address, so the
//! Task API version containerd speaks to us is the one runc-v2 serves.

use containerd_shim::bootstrap::BootstrapResult;
use containerd_shim::protos::protobuf::Message;

/// How runc-v2 answered.
#[derive(Clone, Debug, PartialEq)]
pub enum Form {
    /// A bare `unix://…` address.
    Plain,
    /// JSON bootstrap parameters (kept whole; only `address` is replaced).
    Json(serde_json::Value),
    /// Protobuf `BootstrapResult`.
    Bootstrap(BootstrapResult),
}

/// A parsed `start` answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The shim's ttrpc address.
    pub address: String,
    /// Task API version (`containerd.task.v<N>.Task`): 2 unless the answer says otherwise.
    pub version: i32,
    /// The form, to answer in.
    pub form: Form,
}

/// Why an answer could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read containerd-shim-runc-v2's start answer {shown:?}: {why}")]
pub struct ReplyError {
    /// The answer (lossy, truncated).
    pub shown: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Reply {
    /// Parses runc-v2's stdout.
    pub fn parse(out: &[u8]) -> Result<Reply, ReplyError> {
        let err = |why| ReplyError {
            shown: String::from_utf8_lossy(&out[..out.len().min(200)]).into_owned(),
            why,
        };
        let text = std::str::from_utf8(out).map(str::trim);
        if let Ok(t) = text {
            if t.starts_with('{') {
                let v: serde_json::Value =
                    serde_json::from_str(t).map_err(|_| err("invalid JSON"))?;
                let address = v
                    .get("address")
                    .and_then(|a| a.as_str())
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| err("no address"))?
                    .to_string();
                let version = v.get("version").and_then(|n| n.as_i64()).unwrap_or(2) as i32;
                return Ok(Reply {
                    address,
                    version,
                    form: Form::Json(v),
                });
            }
            if !t.is_empty() && !t.contains(char::is_whitespace) && t.contains("://") {
                return Ok(Reply {
                    address: t.to_string(),
                    version: 2,
                    form: Form::Plain,
                });
            }
        }
        let b = BootstrapResult::parse_from_bytes(out).map_err(|_| err("unknown format"))?;
        if b.address.is_empty() {
            return Err(err("no address"));
        }
        Ok(Reply {
            address: b.address.clone(),
            version: if b.version == 0 { 2 } else { b.version },
            form: Form::Bootstrap(b),
        })
    }

    /// The same answer with `address` in place of runc-v2's.
    pub fn render(&self, address: &str) -> Vec<u8> {
        match &self.form {
            Form::Plain => address.as_bytes().to_vec(),
            Form::Json(v) => {
                let mut v = v.clone();
                if let Some(o) = v.as_object_mut() {
                    o.insert("address".into(), serde_json::Value::from(address));
                }
                serde_json::to_vec(&v).unwrap_or_default()
            }
            Form::Bootstrap(b) => {
                let mut b = b.clone();
                b.address = address.to_string();
                b.write_to_bytes().unwrap_or_default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_address() {
        let r = Reply::parse(b"unix:///run/containerd/s/abc\n").unwrap();
        assert_eq!(r.address, "unix:///run/containerd/s/abc");
        assert_eq!(r.version, 2);
        assert_eq!(r.render("unix:///x"), b"unix:///x");
    }

    #[test]
    fn json_keeps_other_fields() {
        let r =
            Reply::parse(br#"{"version":3,"address":"unix:///s/a","protocol":"ttrpc"}"#).unwrap();
        assert_eq!((r.address.as_str(), r.version), ("unix:///s/a", 3));
        let v: serde_json::Value = serde_json::from_slice(&r.render("unix:///s/b")).unwrap();
        assert_eq!(v["address"], "unix:///s/b");
        assert_eq!(v["version"], 3);
        assert_eq!(v["protocol"], "ttrpc");
    }

    #[test]
    fn bootstrap_protobuf() {
        let b = BootstrapResult {
            version: 3,
            address: "unix:///s/c".into(),
            protocol: "ttrpc".into(),
            ..Default::default()
        };
        let r = Reply::parse(&b.write_to_bytes().unwrap()).unwrap();
        assert_eq!((r.address.as_str(), r.version), ("unix:///s/c", 3));
        let back = BootstrapResult::parse_from_bytes(&r.render("unix:///s/d")).unwrap();
        assert_eq!(back.address, "unix:///s/d");
        assert_eq!(back.protocol, "ttrpc");
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [&b""[..], b"{}", b"{not json", b"some error text"] {
            let e = Reply::parse(bad).unwrap_err();
            assert!(e.to_string().contains("start answer"), "{e}");
        }
    }
}
