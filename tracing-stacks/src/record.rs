//! A span's thread-context record: the OpenTelemetry thread-context layout (OTEP 4947), built
//! once when the span is created and immutable until it closes.
//!
//! | bytes | field |
//! |---|---|
//! | 0..16 | trace id (big-endian) |
//! | 16..24 | span id (big-endian) |
//! | 24 | valid (1) |
//! | 25 | trace flags (0) |
//! | 26..28 | attribute bytes that follow (little-endian u16) |
//! | 28.. | attributes: `key u8, len u8, value[len]` each |
//!
//! Attribute keys: [`ATTR_PARENT`] (the parent span's id, 8 bytes big-endian; absent for a
//! root span) first, then [`ATTR_NAME`] (the span's name, at most 255 bytes of UTF-8).

/// Bytes before the attributes.
pub const HEADER_LEN: usize = 28;
/// Attribute key of the span's name.
pub const ATTR_NAME: u8 = 0;
/// Attribute key of the parent span's id.
pub const ATTR_PARENT: u8 = 1;

/// One span's record, kept in the span's extensions while it lives.
#[derive(Debug)]
pub struct Record(Box<[u8]>);

impl Record {
    /// The record of span `span_id` in trace `trace_id`, under `parent_id` (0: a root span).
    pub fn new(trace_id: u128, span_id: u64, parent_id: u64, name: &str) -> Record {
        let name = truncate(name, 255);
        let mut b = Vec::with_capacity(HEADER_LEN + 10 + 2 + name.len());
        b.extend_from_slice(&trace_id.to_be_bytes());
        b.extend_from_slice(&span_id.to_be_bytes());
        b.push(1);
        b.push(0);
        b.extend_from_slice(&[0, 0]);
        if parent_id != 0 {
            b.extend_from_slice(&[ATTR_PARENT, 8]);
            b.extend_from_slice(&parent_id.to_be_bytes());
        }
        b.extend_from_slice(&[ATTR_NAME, name.len() as u8]);
        b.extend_from_slice(name.as_bytes());
        let attrs = (b.len() - HEADER_LEN) as u16;
        b[26..28].copy_from_slice(&attrs.to_le_bytes());
        Record(b.into_boxed_slice())
    }

    /// Where the record starts (what the thread context points at).
    pub fn as_ptr(&self) -> *const u8 {
        self.0.as_ptr()
    }

    /// The record's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn trace_id(&self) -> u128 {
        u128::from_be_bytes(self.0[0..16].try_into().expect("16 bytes"))
    }

    pub fn span_id(&self) -> u64 {
        u64::from_be_bytes(self.0[16..24].try_into().expect("8 bytes"))
    }

    /// The attributes: (key, value) pairs.
    pub fn attrs(&self) -> impl Iterator<Item = (u8, &[u8])> {
        let mut rest = &self.0[HEADER_LEN..];
        std::iter::from_fn(move || {
            let (&[key, len], tail) = rest.split_first_chunk::<2>()?;
            let value = tail.get(..len as usize)?;
            rest = &tail[len as usize..];
            Some((key, value))
        })
    }

    /// The parent span's id (0: a root span).
    pub fn parent_id(&self) -> u64 {
        self.attrs()
            .find(|&(k, v)| k == ATTR_PARENT && v.len() == 8)
            .map_or(0, |(_, v)| {
                u64::from_be_bytes(v.try_into().expect("8 bytes"))
            })
    }

    /// The span's name.
    pub fn name(&self) -> &str {
        self.attrs()
            .find(|&(k, _)| k == ATTR_NAME)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .unwrap_or("")
    }
}

/// `s` cut to at most `max` bytes at a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_otep_4947_with_parent_then_name() {
        let r = Record::new(7, 9, 3, "burn");
        let b = r.bytes();
        assert_eq!(r.trace_id(), 7);
        assert_eq!(r.span_id(), 9);
        assert_eq!(b[24], 1);
        assert_eq!(
            u16::from_le_bytes([b[26], b[27]]) as usize,
            b.len() - HEADER_LEN
        );
        assert_eq!(&b[28..30], &[ATTR_PARENT, 8]);
        assert_eq!(u64::from_be_bytes(b[30..38].try_into().unwrap()), 3);
        assert_eq!(&b[38..40], &[ATTR_NAME, 4]);
        assert_eq!(&b[40..], b"burn");
        assert_eq!((r.parent_id(), r.name()), (3, "burn"));
        let root = Record::new(5, 5, 0, "é".repeat(200).as_str());
        assert_eq!(root.bytes()[28], ATTR_NAME);
        assert_eq!(root.bytes()[29], 254);
    }
}
