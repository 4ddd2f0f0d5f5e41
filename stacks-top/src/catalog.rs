//! What stacks-top can show: the kinds it shows, each weighed (thread time, bytes, latency)
//! and grouped as its registry entry says (`stacks_stream::kinds::Top`), and the groupable
//! columns — every row column of the store plus computed ones (top user and kernel frame, the
//! whole stack, connection, time buckets).

use arrow_schema::{DataType, Schema};
use stacks_stream::col;
use stacks_stream::kinds::{self, Top};

/// The grouping of a screen over every kind at once.
pub(crate) const ALL_KINDS_GROUP: &[&str] = &[col::KIND, col::COMM];

/// The `--kind` value meaning every kind.
pub const ALL: &str = "all";

/// How kind `name` is weighed and grouped (its registry entry's [`Top`]; whether `value` is
/// bytes is its unit); `None` for a kind stacks-top does not show (`lost`).
pub fn weights(name: &str) -> Option<&'static Top> {
    kinds::get(name)?.top.as_ref()
}

/// Computed column: the innermost user frame.
pub const UFUNC: &str = kinds::UFUNC;
/// Computed column: the innermost kernel frame.
pub const KFUNC: &str = kinds::KFUNC;
/// Computed column: the whole stack, root first, `;`-separated.
pub const STACK: &str = "stack";

/// Where a groupable column comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A column of the `samples` table, by name.
    Row,
    /// Computed once per distinct stack from `stack_table` (SQL over its columns).
    Stack(&'static str),
    /// Computed per row (SQL over the `samples` columns).
    Expr(String),
}

/// One groupable column.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub origin: Origin,
    /// One line for the picker.
    pub about: String,
}

impl Column {
    /// The SQL expression of the column over the relation of [`crate::sql`].
    pub fn sql(&self) -> String {
        match &self.origin {
            Origin::Row | Origin::Stack(_) => quote_ident(&self.name),
            Origin::Expr(e) => e.clone(),
        }
    }
}

/// Row columns never offered for grouping: the time itself, the weights, the stack id and
/// the list-valued ones.
const NOT_GROUPED: &[&str] = &[
    col::TIME,
    col::VALUE,
    col::COUNT,
    col::DURATION,
    col::STACK_ID,
    col::ARGS,
];

/// The groupable columns of a store whose `samples` table has `schema`.
pub fn columns(schema: &Schema) -> Vec<Column> {
    let has = |c: &str| schema.field_with_name(c).is_ok();
    let mut out = Vec::new();
    for f in schema.fields() {
        let name = f.name().as_str();
        let t = f.data_type();
        let scalar = t.is_integer()
            || matches!(
                t,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Boolean
            );
        if scalar && !NOT_GROUPED.contains(&name) {
            out.push(Column {
                name: name.to_string(),
                origin: Origin::Row,
                about: "row column (docs/format.md)".to_string(),
            });
        }
    }
    let stack = |name: &str, sql: &'static str, about: &str| Column {
        name: name.to_string(),
        origin: Origin::Stack(sql),
        about: about.to_string(),
    };
    out.push(stack(
        UFUNC,
        "stack_user_leaf(stack)",
        "top user frame: the innermost function of the program",
    ));
    out.push(stack(
        KFUNC,
        "stack_kernel_leaf(stack)",
        "top kernel frame: where the kernel was",
    ));
    out.push(stack(
        STACK,
        "folded",
        "the whole stack, root first (user frames, then kernel frames)",
    ));
    let expr = |name: &str, sql: String, about: &str| Column {
        name: name.to_string(),
        origin: Origin::Expr(sql),
        about: about.to_string(),
    };
    if has(col::LOCAL) && has(col::REMOTE) {
        out.push(expr(
            "connection",
            "CASE WHEN remote IS NULL THEN local ELSE concat(local, '->', remote) END".into(),
            "local -> remote address of the socket",
        ));
    }
    for (name, width, format, about) in [
        ("hour", "1h", "%Y-%m-%d %H:00", "time bucket of one hour"),
        ("minute", "1m", "%H:%M", "time bucket of one minute"),
        ("s10", "10s", "%H:%M:%S", "time bucket of ten seconds"),
        ("second", "1s", "%H:%M:%S", "time bucket of one second"),
    ] {
        out.push(expr(
            name,
            format!("to_char(time_bucket(time, '{width}'), '{format}')"),
            about,
        ));
    }
    out
}

/// `name` as an SQL identifier (double-quoted when not plain lowercase).
pub(crate) fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// `text` as an SQL string literal.
pub(crate) fn quote_text(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::Field;

    #[test]
    fn columns_offer_row_scalars_and_computed_ones_but_not_weights() {
        let schema = Schema::new(vec![
            Field::new(col::TIME, DataType::Int64, false),
            Field::new(col::COMM, DataType::Utf8, false),
            Field::new(col::PID, DataType::Int32, false),
            Field::new(col::VALUE, DataType::Int64, false),
            Field::new(col::LOCAL, DataType::Utf8, true),
            Field::new(col::REMOTE, DataType::Utf8, true),
        ]);
        let names: Vec<String> = columns(&schema).into_iter().map(|c| c.name).collect();
        for want in [
            "comm",
            "pid",
            "local",
            "ufunc",
            "kfunc",
            "stack",
            "connection",
            "minute",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        assert!(!names.iter().any(|n| n == "value" || n == "time"));
    }

    #[test]
    fn every_default_grouping_names_known_columns() {
        let all = [
            col::STATE,
            col::COMM,
            col::SYSCALL,
            col::PATH,
            col::THREAD,
            col::OP,
            col::DEV,
            col::PROTOCOL,
            col::REMOTE,
            col::SPAN_NAME,
            col::PROBE,
            col::EXIT_CODE,
            col::KIND,
            UFUNC,
            KFUNC,
        ];
        for (k, w) in kinds::shown() {
            for g in w.group {
                assert!(all.contains(g), "{}: {g}", k.name);
            }
        }
        assert!(weights(stacks_stream::kind::LOST).is_none());
    }

    #[test]
    fn identifiers_and_text_are_quoted() {
        assert_eq!(quote_ident("comm"), "comm");
        assert_eq!(quote_ident("Weird name"), "\"Weird name\"");
        assert_eq!(quote_text("it's"), "'it''s'");
    }
}
