//! CPython 3.11's location table (`co_linetable`): which source line an instruction of a code
//! object came from. The table is a run of entries, each covering 1-8 code units; an entry's
//! first byte has the top bit set, a 4-bit form code and the units covered minus one, followed
//! by the form's operands (CPython's `Objects/locations.md`):
//!
//! - 15: no location; 14: long form (line delta as a signed varint, then end line, start and
//!   end columns as varints); 13: no columns (line delta, signed varint);
//! - 10-12: one-line form (line delta = code - 10, then two column bytes);
//! - 0-9: short form (same line, one column byte).
//!
//! Varints are little-endian 6-bit groups, bit 6 set on all but the last; a signed varint keeps
//! the sign in its lowest bit. Lines are relative to the previous entry's, starting at
//! `co_firstlineno`.

/// The line of the instruction at code unit `index` of a code object whose location table is
/// `table` and whose first line is `first_line`; `None` when the table gives it no line or does
/// not reach it (or is malformed).
pub(crate) fn line_at(table: &[u8], first_line: i32, index: u32) -> Option<u32> {
    let mut r = Reader { b: table, at: 0 };
    let mut line = i64::from(first_line);
    let mut start: u64 = 0;
    let want = u64::from(index);
    while let Some(head) = r.byte() {
        if head & 0x80 == 0 {
            return None; // every entry starts with the top bit set
        }
        let code = (head >> 3) & 15;
        let units = u64::from(head & 7) + 1;
        let located = match code {
            15 => false,
            14 => {
                line += r.svarint()?;
                r.varint()?; // end line delta
                r.varint()?; // start column + 1
                r.varint()?; // end column + 1
                true
            }
            13 => {
                line += r.svarint()?;
                true
            }
            10..=12 => {
                line += i64::from(code - 10);
                r.byte()?;
                r.byte()?;
                true
            }
            _ => {
                r.byte()?;
                true
            }
        };
        if want < start + units {
            return if located {
                u32::try_from(line).ok()
            } else {
                None
            };
        }
        start += units;
    }
    None
}

/// Bytes of a table, read in order.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }

    /// An unsigned varint: 6-bit groups, least significant first, bit 6 = more follow.
    fn varint(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            if shift > 60 {
                return None;
            }
            v |= u64::from(b & 63) << shift;
            shift += 6;
            if b & 64 == 0 {
                return Some(v);
            }
        }
    }

    /// A signed varint: the magnitude shifted left by one, the sign in the lowest bit.
    fn svarint(&mut self) -> Option<i64> {
        let v = self.varint()?;
        let m = i64::try_from(v >> 1).ok()?;
        Some(if v & 1 == 1 { -m } else { m })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A function compiled by CPython 3.11.2 (a loop, a continued expression, a
    /// comprehension, try/except, a return split over lines), its `co_linetable` and, per code
    /// unit, the line `co_positions()` gives.
    #[test]
    fn lines_match_cpython() {
        let table = unhex(
            "8000d808098041dd0d12903189588c58f000020511f0000205118801d808098861d80e0ff103010f10f10001091188018801f00403050dd80c21d00c219d05986199089c08d00c21d10c21d40c2188018801f8dd0b14f00001050df00001050df00001050dd8080c8804f00301050df8f8f8f00a000c0dd80809f103010c0af00001050a",
        );
        let n = None;
        let s = Some;
        let want: Vec<Option<u32>> = vec![
            s(1),
            s(2),
            s(2),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(3),
            s(4),
            s(4),
            s(5),
            s(4),
            s(4),
            s(4),
            s(4),
            s(4),
            s(4),
            s(6),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            s(7),
            n,
            s(8),
            s(8),
            s(8),
            s(8),
            s(8),
            s(8),
            s(8),
            s(8),
            s(8),
            s(9),
            s(9),
            s(8),
            n,
            n,
            n,
            s(13),
            s(14),
            s(13),
            s(13),
            s(13),
        ];
        for (i, w) in want.iter().enumerate() {
            assert_eq!(line_at(&table, 1, i as u32), *w, "code unit {i}");
        }
        assert_eq!(
            line_at(&table, 1, want.len() as u32),
            None,
            "past the table"
        );
    }

    #[test]
    fn malformed_tables_give_no_line() {
        assert_eq!(line_at(&[], 1, 0), None);
        assert_eq!(line_at(&[0x00], 1, 0), None, "no entry start bit");
        assert_eq!(line_at(&[0xf8], 1, 0), None, "no-location entry");
        assert_eq!(line_at(&[0xf0], 1, 0), None, "long form cut short");
        assert_eq!(line_at(&[0xf0, 0x7f], 1, 0), None, "varint cut short");
        // No-column form (13), line delta -1 (signed varint 3).
        assert_eq!(line_at(&[0xe8, 3], 10, 0), Some(9));
        // One-line form (12): delta 2; two units.
        assert_eq!(line_at(&[0xe1, 0, 0], 10, 1), Some(12));
        assert_eq!(line_at(&[0xe1, 0, 0], 10, 2), None);
    }
}
