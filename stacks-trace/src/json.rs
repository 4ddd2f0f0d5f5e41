//! Writing JSON by hand, one trace event at a time: objects are appended to a reused `String`
//! (keys in insertion order, strings escaped by serde_json), and timestamps are decimal
//! microseconds with three fractional digits, so nanoseconds survive exactly.

use std::fmt::Write as _;

/// An object being appended to a buffer: `{` when created, `}` by [`Obj::end`].
pub(crate) struct Obj<'a> {
    buf: &'a mut String,
    first: bool,
}

/// Append `s` as a JSON string literal.
pub(crate) fn push_str_literal(buf: &mut String, s: &str) {
    // Serializing a &str cannot fail.
    buf.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

/// Nanoseconds as decimal microseconds, `1234.567` (always three fractional digits).
pub(crate) fn micros(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let abs = ns.unsigned_abs();
    format!("{sign}{}.{:03}", abs / 1000, abs % 1000)
}

impl<'a> Obj<'a> {
    pub(crate) fn new(buf: &'a mut String) -> Self {
        buf.push('{');
        Self { buf, first: true }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.buf.push(',');
        }
        self.first = false;
        push_str_literal(self.buf, key);
        self.buf.push(':');
    }

    pub(crate) fn str(&mut self, key: &str, value: &str) -> &mut Self {
        self.key(key);
        push_str_literal(self.buf, value);
        self
    }

    pub(crate) fn int(&mut self, key: &str, value: i64) -> &mut Self {
        self.key(key);
        let _ = write!(self.buf, "{value}");
        self
    }

    /// A timestamp or duration in ns, written as microseconds.
    pub(crate) fn micros(&mut self, key: &str, ns: i64) -> &mut Self {
        self.key(key);
        self.buf.push_str(&micros(ns));
        self
    }

    /// An array of strings.
    pub(crate) fn strs<'s>(
        &mut self,
        key: &str,
        values: impl IntoIterator<Item = &'s str>,
    ) -> &mut Self {
        self.key(key);
        self.buf.push('[');
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.buf.push(',');
            }
            push_str_literal(self.buf, v);
        }
        self.buf.push(']');
        self
    }

    /// A nested object under `key`; end it before touching this one again.
    pub(crate) fn obj(&mut self, key: &str) -> Obj<'_> {
        self.key(key);
        Obj::new(self.buf)
    }

    pub(crate) fn end(&mut self) {
        self.buf.push('}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_keep_nanoseconds() {
        assert_eq!(micros(0), "0.000");
        assert_eq!(micros(1), "0.001");
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(-1_500), "-1.500");
        assert_eq!(micros(i64::MIN), "-9223372036854775.808");
    }

    #[test]
    fn objects_nest_and_escape() {
        let mut buf = String::new();
        let mut o = Obj::new(&mut buf);
        o.str("name", "a \"b\"\n").int("pid", -3).micros("ts", 1500);
        o.obj("args").strs("stack", ["x", "y"]).end();
        o.end();
        assert_eq!(
            buf,
            r#"{"name":"a \"b\"\n","pid":-3,"ts":1.500,"args":{"stack":["x","y"]}}"#
        );
        let v: serde_json::Value = serde_json::from_str(&buf).expect("valid JSON");
        assert_eq!(v["ts"], 1.5);
    }
}
