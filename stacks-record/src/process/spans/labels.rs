//! Decoding the span part of a record (tracing-stacks' record: trace id, span id,
//! attributes) into a row's span columns.

use std::collections::HashMap;
use std::rc::Rc;

use crate::kernel::abi::types::stacks_span;

/// Attribute keys of the record (tracing-stacks' `ATTR_NAME`, `ATTR_PARENT`).
const ATTR_NAME: u8 = 0;
const ATTR_PARENT: u8 = 1;

/// A row's span, as its columns show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SpanLabel {
    pub id: u64,
    pub parent: Option<u64>,
    pub name: Option<Rc<str>>,
    /// 32 lowercase hex digits.
    pub trace_id: Rc<str>,
}

/// Decoded span labels by span id (a span's record does not change while it lives).
#[derive(Default)]
pub(crate) struct SpanLabels {
    seen: HashMap<u64, SpanLabel, ahash::RandomState>,
}

impl SpanLabels {
    /// The label of a record's span part, `None` when it names no span.
    pub(crate) fn label(&mut self, s: &stacks_span) -> Option<SpanLabel> {
        let id = u64::from_be_bytes(s.span_id.to_ne_bytes());
        if id == 0 {
            return None;
        }
        if let Some(l) = self.seen.get(&id) {
            return Some(l.clone());
        }
        let label = decode(id, s);
        if self.seen.len() >= 1 << 16 {
            self.seen.clear();
        }
        self.seen.insert(id, label.clone());
        Some(label)
    }
}

fn decode(id: u64, s: &stacks_span) -> SpanLabel {
    let n = usize::from(s.attrs_len).min(s.attrs.len());
    let (mut name, mut parent) = (None, None);
    let mut rest = &s.attrs[..n];
    while let [key, len, tail @ ..] = rest {
        let len = usize::from(*len);
        // An attribute past the bytes read is cut short: a name keeps its valid prefix.
        let value = &tail[..len.min(tail.len())];
        match *key {
            ATTR_NAME => {
                let valid = match std::str::from_utf8(value) {
                    Ok(v) => v,
                    Err(e) => std::str::from_utf8(&value[..e.valid_up_to()]).unwrap_or(""),
                };
                name = Some(Rc::from(valid));
            }
            ATTR_PARENT if value.len() == 8 => {
                parent = Some(u64::from_be_bytes(value.try_into().expect("8 bytes")));
            }
            _ => {}
        }
        rest = tail.get(len..).unwrap_or(&[]);
    }
    let trace_id: String = s.trace_id.iter().map(|b| format!("{b:02x}")).collect();
    SpanLabel {
        id,
        parent,
        name,
        trace_id: Rc::from(trace_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_decode_with_a_name_cut_short() {
        let r = tracing_stacks::Record::new(
            0xab,
            7,
            3,
            "a_rather_long_span_name_that_goes_past_the_bytes_read_xxxxxxxxxxxx",
        );
        let b = r.bytes();
        let mut s = stacks_span::default();
        s.trace_id.copy_from_slice(&b[..16]);
        s.span_id = u64::from_ne_bytes(b[16..24].try_into().unwrap());
        s.attrs_len = (b.len() - 28) as u16;
        let n = s.attrs.len().min(b.len() - 28);
        s.attrs[..n].copy_from_slice(&b[28..28 + n]);
        let l = SpanLabels::default().label(&s).unwrap();
        assert_eq!((l.id, l.parent), (7, Some(3)));
        assert_eq!(&*l.trace_id, "000000000000000000000000000000ab");
        let name = l.name.unwrap();
        assert!(
            name.starts_with("a_rather_long") && name.len() == 64 - 10 - 2,
            "{name}"
        );
    }
}
