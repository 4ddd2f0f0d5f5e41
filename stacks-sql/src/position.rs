//! Errors from planning and running SQL, as one line that points at the SQL: `QUERY:LINE:COL:
//! message` when DataFusion knows where (parser errors and diagnostics carry a span),
//! `QUERY: message` otherwise.

use datafusion::error::DataFusionError;

/// Where in the SQL text an error is, 1-based, if the error says.
pub fn position(e: &DataFusionError) -> Option<(u64, u64)> {
    if let Some(d) = e.diagnostic()
        && let Some(span) = d.span
        && span.start.line > 0
    {
        return Some((span.start.line, span.start.column));
    }
    parser_position(&e.to_string()).map(|(l, c, _)| (l, c))
}

/// `Line: L, Column: C` in a parser message: (line, column, the message without it).
fn parser_position(msg: &str) -> Option<(u64, u64, String)> {
    let at = msg.rfind("Line: ")?;
    let rest = &msg[at + "Line: ".len()..];
    let (line, rest) = rest.split_once(", Column: ")?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let line: u64 = line.trim().parse().ok()?;
    let column: u64 = rest[..digits].parse().ok()?;
    let mut before = msg[..at].trim_end().to_string();
    for tail in [" at", ","] {
        if let Some(b) = before.strip_suffix(tail) {
            before = b.trim_end().to_string();
        }
    }
    let after = rest[digits..].trim_start_matches(['"', ')']).trim();
    let text = if after.is_empty() {
        before
    } else {
        format!("{before} {after}")
    };
    Some((line, column, text))
}

/// The message of a DataFusion error on one line: the parser's position is dropped from it
/// (it goes in front), and the `ParserError("…")` debug wrapping is removed.
fn message(e: &DataFusionError) -> String {
    let text = e.to_string();
    let text = match parser_position(&text) {
        Some((_, _, t)) => t,
        None => text,
    };
    text.replace("ParserError(\"", "")
        .replace("\\\"", "\"")
        .replace('\n', " ")
}

/// The error as `label:line:col: message` or `label: message`.
pub fn locate(label: &str, e: &DataFusionError) -> anyhow::Error {
    let msg = message(e);
    match position(e) {
        Some((line, col)) => anyhow::anyhow!("{label}:{line}:{col}: {msg}"),
        None => anyhow::anyhow!("{label}: {msg}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_positions_are_pulled_out() {
        let msg = "SQL error: ParserError(\"Expected: an SQL statement, found: SELEC at Line: 2, Column: 3\")";
        let (l, c, text) = parser_position(msg).unwrap();
        assert_eq!((l, c), (2, 3));
        assert_eq!(
            text,
            "SQL error: ParserError(\"Expected: an SQL statement, found: SELEC"
        );
        assert!(parser_position("no position here").is_none());
    }

    #[test]
    fn located_errors_read_well() {
        let e = DataFusionError::SQL(
            Box::new(
                datafusion::sql::sqlparser::parser::ParserError::ParserError(
                    "Expected: end of statement, found: x at Line: 3, Column: 14".into(),
                ),
            ),
            None,
        );
        let text = locate("q.sql", &e).to_string();
        assert!(text.starts_with("q.sql:3:14: "), "{text}");
        assert!(
            text.ends_with("Expected: end of statement, found: x"),
            "{text}"
        );
    }
}
