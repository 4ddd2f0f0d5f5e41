//! Query parameters. A query file declares its parameters in header comments:
//!
//! ```sql
//! -- param: comm text = '%'        process names to keep (SQL LIKE pattern)
//! -- param: from timestamp = null  start of the time window (inclusive)
//! ```
//!
//! and uses them as `$comm`, `$from`. `--param name=value` values are parsed into typed
//! scalars and bound to the placeholders by DataFusion: they are values, never SQL text.
//! Inline `-c` SQL declares nothing; its parameters' types are inferred from their values.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use datafusion::common::ParamValues;
use datafusion::common::ScalarValue;

/// The type of a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// 64-bit integer.
    Int,
    /// 64-bit float.
    Float,
    /// true / false.
    Bool,
    /// Text.
    Text,
    /// A UTC timestamp in the shared time grammar ([`stacks_stream::time::parse_time`]):
    /// RFC 3339 (`2025-01-02T03:04:05Z`), `YYYY-MM-DD[ HH:MM:SS[.f]]` (UTC), or nanoseconds
    /// since the Unix epoch.
    Timestamp,
    /// A length of time in the shared duration grammar: a number and a unit, ns, us, ms, s,
    /// m, h or d (`10s`, `1.5ms`); a bare number is seconds.
    Interval,
}

impl ParamType {
    fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "int" => Self::Int,
            "float" => Self::Float,
            "bool" => Self::Bool,
            "text" => Self::Text,
            "timestamp" => Self::Timestamp,
            "interval" => Self::Interval,
            _ => return None,
        })
    }

    /// The name used in declarations.
    pub fn name(self) -> &'static str {
        match self {
            Self::Int => "int",
            Self::Float => "float",
            Self::Bool => "bool",
            Self::Text => "text",
            Self::Timestamp => "timestamp",
            Self::Interval => "interval",
        }
    }

    fn null(self) -> ScalarValue {
        match self {
            Self::Int => ScalarValue::Int64(None),
            Self::Float => ScalarValue::Float64(None),
            Self::Bool => ScalarValue::Boolean(None),
            Self::Text => ScalarValue::Utf8(None),
            Self::Timestamp => ScalarValue::TimestampNanosecond(None, Some("UTC".into())),
            Self::Interval => ScalarValue::IntervalMonthDayNano(None),
        }
    }

    /// Parse `text` as a value of this type; `None` (not `Err`) when it does not fit.
    fn value(self, text: &str) -> Option<ScalarValue> {
        Some(match self {
            Self::Int => ScalarValue::Int64(Some(text.parse().ok()?)),
            Self::Float => ScalarValue::Float64(Some(text.parse().ok()?)),
            Self::Bool => ScalarValue::Boolean(Some(match text.to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" => true,
                "false" | "no" | "off" => false,
                _ => return None,
            })),
            Self::Text => ScalarValue::Utf8(Some(text.to_string())),
            Self::Timestamp => ScalarValue::TimestampNanosecond(
                Some(
                    stacks_stream::time::parse_time_ago(text, stacks_stream::time::now_ns())
                        .ok()?,
                ),
                Some("UTC".into()),
            ),
            Self::Interval => ScalarValue::IntervalMonthDayNano(Some(
                arrow_array::types::IntervalMonthDayNano::new(0, 0, parse_duration_ns(text)?),
            )),
        })
    }

    fn example(self) -> String {
        match self {
            Self::Int => "an integer, e.g. 42".into(),
            Self::Float => "a number, e.g. 0.5".into(),
            Self::Bool => "true or false".into(),
            Self::Text => "text".into(),
            Self::Timestamp => format!(
                "a timestamp ({}; or {})",
                stacks_stream::time::TIME_EXAMPLES,
                stacks_stream::time::AGO_EXAMPLES
            ),
            Self::Interval => format!(
                "a length of time ({})",
                stacks_stream::cli::DURATION_EXAMPLES
            ),
        }
    }
}

/// Nanoseconds in a length of time, in the shared duration grammar
/// ([`stacks_stream::cli::parse_duration_ns`]: `10s`, `1.5ms`, `2h`, `90`); `None` if malformed.
pub fn parse_duration_ns(text: &str) -> Option<i64> {
    let ns = stacks_stream::cli::parse_duration_ns(text).ok()?;
    i64::try_from(ns).ok()
}

/// One declared parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Decl {
    pub name: String,
    pub ty: ParamType,
    pub default: ScalarValue,
    /// The default as written.
    pub default_text: String,
    pub description: String,
}

/// Split a default literal off the front of `rest`: `null`, a `'quoted'` string (`''` is a
/// quote) or a bare word. Returns (value text or None for null, the literal, remainder).
fn take_default(rest: &str) -> Option<(Option<String>, String, &str)> {
    let rest = rest.trim_start();
    if let Some(body) = rest.strip_prefix('\'') {
        let mut value = String::new();
        let mut chars = body.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c == '\'' {
                if chars.peek().map(|(_, c)| *c) == Some('\'') {
                    chars.next();
                    value.push('\'');
                    continue;
                }
                let end = i + 1;
                return Some((Some(value), format!("'{}", &body[..end]), &body[end..]));
            }
            value.push(c);
        }
        return None;
    }
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let word = &rest[..end];
    if word.is_empty() {
        return None;
    }
    let value = (!word.eq_ignore_ascii_case("null")).then(|| word.to_string());
    Some((value, word.to_string(), &rest[end..]))
}

/// The first whitespace-separated word of `s` and what follows it.
fn first_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    s.split_at(end)
}

/// The `-- param:` declarations of `sql`, in order. `label` names the query in errors.
pub fn declarations(label: &str, sql: &str) -> Result<Vec<Decl>> {
    let mut out: Vec<Decl> = Vec::new();
    for (n, line) in sql.lines().enumerate() {
        let Some(body) = line.trim().strip_prefix("--") else {
            continue;
        };
        let Some(body) = body.trim().strip_prefix("param:") else {
            continue;
        };
        let at = format!("{label}:{}", n + 1);
        let form = "`-- param: NAME TYPE = DEFAULT description`";
        let (name, rest) = first_word(body);
        let (ty, after_type) = first_word(rest);
        if name.is_empty() || ty.is_empty() {
            bail!("{at}: a parameter declaration reads {form}");
        }
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("{at}: parameter name `{name}`: use letters, digits and _");
        }
        let Some(ty) = ParamType::parse(ty) else {
            bail!(
                "{at}: parameter `{name}`: unknown type `{ty}` (int, float, bool, text, timestamp, interval)"
            );
        };
        let after_type = after_type.trim_start();
        let Some(after_eq) = after_type.strip_prefix('=') else {
            bail!("{at}: parameter `{name}` needs a default: {form} (DEFAULT may be null)");
        };
        let Some((value, literal, rest)) = take_default(after_eq) else {
            bail!("{at}: parameter `{name}`: unreadable default (a 'quoted' text, a word or null)");
        };
        let default = match &value {
            None => ty.null(),
            Some(v) => ty.value(v).ok_or_else(|| {
                anyhow::anyhow!(
                    "{at}: parameter `{name}`: default {literal} is not {}",
                    ty.example()
                )
            })?,
        };
        if out.iter().any(|d| d.name == name) {
            bail!("{at}: parameter `{name}` is declared twice");
        }
        out.push(Decl {
            name: name.to_string(),
            ty,
            default,
            default_text: literal,
            description: rest.trim().to_string(),
        });
    }
    Ok(out)
}

/// The type a value of an undeclared parameter is taken to have.
pub(crate) fn infer(text: &str) -> ScalarValue {
    if text.is_empty() {
        return ScalarValue::Null;
    }
    for ty in [
        ParamType::Int,
        ParamType::Float,
        ParamType::Bool,
        ParamType::Interval,
        ParamType::Timestamp,
    ] {
        if let Some(v) = ty.value(text) {
            return v;
        }
    }
    ScalarValue::Utf8(Some(text.to_string()))
}

/// Split `name=value` (from `--param`).
pub fn split_assignment(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => Ok((
            name.trim().trim_start_matches('$').to_string(),
            value.to_string(),
        )),
        _ => Err(format!("`{arg}`: give a parameter as NAME=VALUE")),
    }
}

/// The values to bind: declared parameters get their defaults unless given; given values are
/// parsed by the declared type (inferred for undeclared parameters of `-c` SQL). An empty
/// value is NULL.
pub fn bind(
    label: &str,
    decls: &[Decl],
    given: &[(String, String)],
    inline: bool,
) -> Result<ParamValues> {
    let mut values: BTreeMap<String, ScalarValue> = decls
        .iter()
        .map(|d| (d.name.clone(), d.default.clone()))
        .collect();
    for (name, text) in given {
        let value = match decls.iter().find(|d| &d.name == name) {
            Some(d) if text.is_empty() => d.ty.null(),
            Some(d) => d.ty.value(text).ok_or_else(|| {
                anyhow::anyhow!(
                    "--param {name}={text}: {label} takes {} here",
                    d.ty.example()
                )
            })?,
            None if inline || decls.is_empty() => infer(text),
            None => {
                let known: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
                bail!(
                    "--param {name}: {label} has no parameter `{name}` (it takes: {})",
                    known.join(", ")
                );
            }
        };
        values.insert(name.clone(), value);
    }
    Ok(ParamValues::from(values.into_iter().collect::<Vec<_>>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SQL: &str = "-- A question.\n\
        -- param: comm text = '%'   process names (LIKE)\n\
        -- param: who text = 'O''Brien x'  quoted\n\
        -- param: pid int = null\n\
        -- param: from timestamp = 2025-01-02T03:04:05Z  start\n\
        -- param: step interval = 1s\n\
        SELECT 1";

    #[test]
    fn declarations_are_read_with_types_and_defaults() {
        let d = declarations("q", SQL).unwrap();
        let names: Vec<&str> = d.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["comm", "who", "pid", "from", "step"]);
        assert_eq!(d[0].default, ScalarValue::Utf8(Some("%".into())));
        assert_eq!(d[0].description, "process names (LIKE)");
        assert_eq!(d[1].default, ScalarValue::Utf8(Some("O'Brien x".into())));
        assert_eq!(d[1].description, "quoted");
        assert_eq!(d[2].default, ScalarValue::Int64(None));
        assert_eq!(
            d[3].default,
            ScalarValue::TimestampNanosecond(Some(1_735_787_045_000_000_000), Some("UTC".into()))
        );
        assert_eq!(
            d[4].default,
            ScalarValue::IntervalMonthDayNano(Some(arrow_array::types::IntervalMonthDayNano::new(
                0,
                0,
                1_000_000_000
            )))
        );
    }

    #[test]
    fn bad_declarations_name_the_line() {
        for (sql, want) in [
            (
                "-- param: x blob = 1",
                "q:1: parameter `x`: unknown type `blob`",
            ),
            ("\n-- param: x int", "q:2: parameter `x` needs a default"),
            (
                "-- param: x int = abc",
                "q:1: parameter `x`: default abc is not an integer",
            ),
            ("-- param: x-y int = 1", "q:1: parameter name `x-y`"),
            (
                "-- param: x int = 1\n-- param: x int = 2",
                "q:2: parameter `x` is declared twice",
            ),
            (
                "-- param: x text = 'open",
                "q:1: parameter `x`: unreadable default",
            ),
        ] {
            let err = declarations("q", sql).unwrap_err().to_string();
            assert!(err.starts_with(want), "{sql}: {err}");
        }
    }

    #[test]
    fn values_are_typed_by_declaration_or_inferred() {
        let d = declarations("q", SQL).unwrap();
        let given = vec![
            ("pid".to_string(), "42".to_string()),
            ("comm".to_string(), "x'; DROP TABLE stacks; --".to_string()),
        ];
        let ParamValues::Map(m) = bind("q", &d, &given, false).unwrap() else {
            panic!()
        };
        assert_eq!(m["pid"].value, ScalarValue::Int64(Some(42)));
        assert_eq!(
            m["comm"].value,
            ScalarValue::Utf8(Some("x'; DROP TABLE stacks; --".into()))
        );
        assert_eq!(m["step"].value, d[4].default);

        let err = bind("q", &d, &[("pid".into(), "many".into())], false).unwrap_err();
        assert!(err.to_string().contains("takes an integer"), "{err}");
        let err = bind("q", &d, &[("nope".into(), "1".into())], false).unwrap_err();
        assert!(err.to_string().contains("has no parameter `nope`"), "{err}");
        let ParamValues::Map(m) = bind("q", &d, &[("pid".into(), String::new())], false).unwrap()
        else {
            panic!()
        };
        assert_eq!(m["pid"].value, ScalarValue::Int64(None));

        assert_eq!(infer("7"), ScalarValue::Int64(Some(7)));
        assert_eq!(infer("0.5"), ScalarValue::Float64(Some(0.5)));
        assert_eq!(infer("true"), ScalarValue::Boolean(Some(true)));
        assert!(matches!(
            infer("250ms"),
            ScalarValue::IntervalMonthDayNano(Some(_))
        ));
        assert!(matches!(
            infer("2025-01-02"),
            ScalarValue::TimestampNanosecond(Some(_), _)
        ));
        assert_eq!(infer("burn"), ScalarValue::Utf8(Some("burn".into())));
        assert_eq!(infer("10 s'"), ScalarValue::Utf8(Some("10 s'".into())));
        assert_eq!(infer(""), ScalarValue::Null);
    }

    #[test]
    fn typed_values_use_the_shared_grammar() {
        const DAY: i64 = 1_735_776_000_000_000_000; // 2025-01-02T00:00:00Z
        for (text, ns) in [
            ("2025-01-02", DAY),
            ("2025-01-02T00:00:01Z", DAY + 1_000_000_000),
            ("2025-01-02 01:00:00.5+01:00", DAY + 500_000_000),
        ] {
            assert_eq!(
                ParamType::Timestamp.value(text),
                Some(ScalarValue::TimestampNanosecond(
                    Some(ns),
                    Some("UTC".into())
                )),
                "{text}"
            );
        }
        for (text, ns) in [
            ("90", 90_000_000_000),
            ("1.5s", 1_500_000_000),
            ("1d", 86_400_000_000_000),
        ] {
            assert_eq!(
                ParamType::Interval.value(text),
                Some(ScalarValue::IntervalMonthDayNano(Some(
                    arrow_array::types::IntervalMonthDayNano::new(0, 0, ns)
                ))),
                "{text}"
            );
        }
        assert_eq!(ParamType::Timestamp.value("yesterday"), None);
        assert_eq!(ParamType::Interval.value("-1s"), None);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("1s"), Some(1_000_000_000));
        assert_eq!(parse_duration_ns("1.5ms"), Some(1_500_000));
        assert_eq!(parse_duration_ns("2m"), Some(120_000_000_000));
        assert_eq!(parse_duration_ns("10"), Some(10_000_000_000), "seconds");
        assert_eq!(parse_duration_ns("1d"), Some(86_400_000_000_000));
        assert_eq!(parse_duration_ns("-1s"), None);
        assert_eq!(parse_duration_ns("s"), None);
        assert_eq!(parse_duration_ns("1x"), None);
    }
}
