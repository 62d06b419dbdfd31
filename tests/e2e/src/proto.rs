//! Just enough protocol buffers for the CRI messages the suites send and read: an encoder for
//! strings, integers, booleans, nested messages and `map<string, string>`, and a decoder that
//! finds a field by number. Field numbers come from the CRI `runtime.v1` API (`api.proto`).

/// An encoded message under construction.
#[derive(Debug, Default, Clone)]
pub struct Msg(pub Vec<u8>);

fn varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

impl Msg {
    /// An empty message.
    pub fn new() -> Self {
        Self::default()
    }

    fn key(&mut self, field: u32, wire: u8) {
        varint(&mut self.0, (u64::from(field) << 3) | u64::from(wire));
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        varint(&mut self.0, b.len() as u64);
        self.0.extend_from_slice(b);
    }

    /// A `string` field (skipped when empty, as proto3 does).
    pub fn str(mut self, field: u32, s: &str) -> Self {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
        self
    }

    /// Each element of a `repeated string` field.
    pub fn strs<S: AsRef<str>>(mut self, field: u32, v: &[S]) -> Self {
        for s in v {
            self.bytes(field, s.as_ref().as_bytes());
        }
        self
    }

    /// An integer or enum field (skipped when 0).
    pub fn int(mut self, field: u32, v: u64) -> Self {
        if v != 0 {
            self.key(field, 0);
            varint(&mut self.0, v);
        }
        self
    }

    /// A `bool` field (skipped when false).
    pub fn flag(self, field: u32, v: bool) -> Self {
        self.int(field, u64::from(v))
    }

    /// A nested message (always written, even when empty).
    pub fn msg(mut self, field: u32, m: Msg) -> Self {
        self.bytes(field, &m.0);
        self
    }

    /// A `map<string, string>` field (entries: key = 1, value = 2).
    pub fn map<K: AsRef<str>, V: AsRef<str>>(mut self, field: u32, kv: &[(K, V)]) -> Self {
        for (k, v) in kv {
            let e = Msg::new().str(1, k.as_ref()).str(2, v.as_ref());
            self.bytes(field, &e.0);
        }
        self
    }
}

/// One decoded field value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 2 (string, bytes, nested message, packed repeated).
    Bytes(&'a [u8]),
    /// Wire types 1 and 5 (not used by the fields we read).
    Fixed(u64),
}

fn read_varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Every `(field, value)` of an encoded message, in order; `None` when it is malformed.
pub fn fields(b: &[u8]) -> Option<Vec<(u32, Value<'_>)>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = read_varint(b, &mut i)?;
        let field = u32::try_from(key >> 3).ok()?;
        let v = match key & 7 {
            0 => Value::Varint(read_varint(b, &mut i)?),
            2 => {
                let n = usize::try_from(read_varint(b, &mut i)?).ok()?;
                let end = i.checked_add(n).filter(|e| *e <= b.len())?;
                let s = &b[i..end];
                i = end;
                Value::Bytes(s)
            }
            1 => {
                let s = b.get(i..i + 8)?;
                i += 8;
                Value::Fixed(u64::from_le_bytes(s.try_into().ok()?))
            }
            5 => {
                let s = b.get(i..i + 4)?;
                i += 4;
                Value::Fixed(u64::from(u32::from_le_bytes(s.try_into().ok()?)))
            }
            _ => return None,
        };
        out.push((field, v));
    }
    Some(out)
}

/// The bytes of the first length-delimited `field` (a string or nested message).
pub fn get_bytes(b: &[u8], field: u32) -> Option<&[u8]> {
    fields(b)?.into_iter().find_map(|(f, v)| match v {
        Value::Bytes(s) if f == field => Some(s),
        _ => None,
    })
}

/// The first `string` `field` (empty when absent, as proto3 reads it).
pub fn get_str(b: &[u8], field: u32) -> String {
    get_bytes(b, field)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .unwrap_or_default()
}

/// The first varint `field` (0 when absent).
pub fn get_int(b: &[u8], field: u32) -> u64 {
    fields(b)
        .and_then(|fs| {
            fs.into_iter().find_map(|(f, v)| match v {
                Value::Varint(x) if f == field => Some(x),
                _ => None,
            })
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let inner = Msg::new().str(1, "abc").int(3, 300);
        let m = Msg::new()
            .msg(1, inner)
            .str(2, "")
            .flag(4, true)
            .map(7, &[("k", "v")]);
        let outer = m.0;
        let inner = get_bytes(&outer, 1).expect("nested");
        assert_eq!(get_str(inner, 1), "abc");
        assert_eq!(get_int(inner, 3), 300);
        assert_eq!(get_str(&outer, 2), "", "empty strings are not written");
        assert_eq!(get_int(&outer, 4), 1);
        let e = get_bytes(&outer, 7).expect("map entry");
        assert_eq!((get_str(e, 1), get_str(e, 2)), ("k".into(), "v".into()));
        // Negative int32 (exit codes) arrive as 10-byte varints.
        let neg = Msg::new().int(7, (-1i64) as u64).0;
        assert_eq!(get_int(&neg, 7) as i64 as i32, -1);
        assert!(fields(&[0x0a, 0x05, 0x01]).is_none(), "truncated field");
    }
}
