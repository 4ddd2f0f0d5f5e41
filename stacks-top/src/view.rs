//! What one screen shows — kind, grouping, filters, window, latency columns — and the SQL
//! that answers it over the `samples` and `stack_table` tables of a store: the grouped table,
//! the sparkline of active threads, and the stack tree of one row.

use stacks_stream::kinds::{self, Unit};

use crate::catalog::{self, Column, Origin, quote_ident};

/// Nanoseconds since the Unix epoch.
pub(crate) type Ns = i64;

/// A half-open time interval `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub from: Ns,
    pub to: Ns,
}

impl Span {
    /// Its length, at least 1 ns (an average over it never divides by zero).
    pub fn len(&self) -> Ns {
        (self.to - self.from).max(1)
    }

    /// Whether it holds no time at all.
    pub fn is_empty(&self) -> bool {
        self.to <= self.from
    }
}

/// A value a filter compares a column with, as an SQL literal (typed as the column's values
/// were) and as shown on the screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// `None`: the column is null.
    pub sql: Option<String>,
    pub shown: String,
}

/// `column = value`, added by a drill-down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub column: String,
    pub value: Value,
}

/// A filter the breadcrumb shows: a drill-down or an SQL condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Is(Filter),
    Sql(String),
    /// The rows whose column is one of the values (`IN`), or none of them (`NOT IN`): the
    /// Space menu.
    In {
        column: String,
        values: Vec<Value>,
        not: bool,
    },
}

impl Step {
    pub fn shown(&self) -> String {
        match self {
            Step::Is(f) => format!("{} = {}", f.column, f.value.shown),
            Step::Sql(s) => format!("({s})"),
            Step::In {
                column,
                values,
                not,
            } => {
                let shown: Vec<&str> = values.iter().map(|v| v.shown.as_str()).collect();
                format!(
                    "{column} {}IN ({})",
                    if *not { "NOT " } else { "" },
                    shown.join(", ")
                )
            }
        }
    }
}

/// Everything a table query depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// One kind, or every kind (`None`).
    pub kind: Option<String>,
    pub group: Vec<String>,
    pub steps: Vec<Step>,
    pub window: Span,
    pub latency: bool,
    pub limit: usize,
}

impl View {
    /// The title of the row whose group columns have `values`: `col = value · …`.
    pub fn row_title(&self, values: &[Value]) -> String {
        let title: Vec<String> = self
            .group
            .iter()
            .zip(values)
            .map(|(g, v)| format!("{g} = {}", v.shown))
            .collect();
        title.join(" · ")
    }
}

/// The columns of a table query's result after the group columns, in order.
pub const SAMPLES: &str = "samples";
pub(crate) const THREAD_NS: &str = "thread_ns";
pub const BYTES: &str = "bytes";
pub(crate) const LAT_N: &str = "lat_n";
pub(crate) const PERCENTILES: [(&str, f64); 3] =
    [("p50_ns", 0.5), ("p95_ns", 0.95), ("p99_ns", 0.99)];
/// Latency buckets: `<1µs` (under 2^10 ns), then [2^(k+9), 2^(k+10)) ns for k = 1..=20, then
/// `≥1s` (2^30 ns): powers of two of ns, the buckets the kernel aggregates IO latencies in.
pub(crate) const BUCKETS: usize = 22;

/// Which rows a stack tree links to the `wake` rows that ended their waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wakers {
    /// The rows hold `wake` rows: `switch` rows link by their own switch-out.
    pub switch: bool,
    /// And `state` rows carry `offcpu_since`: they link by the interval they were sampled in.
    pub state: bool,
}

/// The SQL of the columns a view needs, resolved against the catalog.
pub struct Planner<'a> {
    pub columns: &'a [Column],
}

impl Planner<'_> {
    /// The catalog column `name`.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The relation every query reads: `samples`, joined to the per-stack computed columns
    /// the query uses (computed once per distinct stack, not per row).
    fn relation(&self, used: &[&Column], text: &[&str]) -> String {
        self.relation_of("samples", used, text)
    }

    /// [`Planner::relation`] over `base`, `samples` or a view over it with its columns
    /// (stacks-sql's `waits`).
    fn relation_of(&self, base: &str, used: &[&Column], text: &[&str]) -> String {
        let mut stack_cols: Vec<&Column> = self
            .columns
            .iter()
            .filter(|c| matches!(c.origin, Origin::Stack(_)))
            .filter(|c| {
                used.iter().any(|u| u.name == c.name) || text.iter().any(|t| mentions(t, &c.name))
            })
            .collect();
        stack_cols.dedup_by(|a, b| a.name == b.name);
        if stack_cols.is_empty() {
            return base.to_string();
        }
        let derived: Vec<String> = stack_cols
            .iter()
            .map(|c| match c.origin {
                Origin::Stack(sql) => format!("{sql} AS {}", quote_ident(&c.name)),
                _ => unreachable!("stack columns only"),
            })
            .collect();
        let picked: Vec<String> = stack_cols
            .iter()
            .map(|c| format!("t.{}", quote_ident(&c.name)))
            .collect();
        format!(
            "(SELECT s.*, {} FROM {base} s LEFT JOIN (SELECT stack_id, {} FROM stack_table) t \
             ON s.stack_id = t.stack_id)",
            picked.join(", "),
            derived.join(", ")
        )
    }

    /// The conditions of `view` but its window: kind, drill-downs, SQL filters, plus `extra`.
    fn conditions(&self, view: &View, extra: &[String]) -> Vec<String> {
        let mut out = vec![format!("kind <> {}", catalog::quote_text("lost"))];
        if let Some(k) = &view.kind {
            out.push(format!("kind = {}", catalog::quote_text(k)));
        }
        for step in &view.steps {
            out.push(match step {
                Step::Is(f) => self.equals(&f.column, &f.value),
                Step::Sql(s) => format!("({s})"),
                Step::In {
                    column,
                    values,
                    not,
                } => self.one_of(column, values, *not),
            });
        }
        out.extend(extra.iter().cloned());
        out
    }

    /// `column = value` (or `IS NULL`) in SQL.
    pub fn equals(&self, column: &str, value: &Value) -> String {
        let expr = self
            .column(column)
            .map(Column::sql)
            .unwrap_or_else(|| quote_ident(column));
        match &value.sql {
            Some(v) => format!("{expr} = {v}"),
            None => format!("{expr} IS NULL"),
        }
    }

    /// `column` is one of `values` (a null value: the column is null), or with `not` none of
    /// them (a null column is kept unless a null value is listed).
    pub fn one_of(&self, column: &str, values: &[Value], not: bool) -> String {
        let expr = self
            .column(column)
            .map(Column::sql)
            .unwrap_or_else(|| quote_ident(column));
        let literals: Vec<&str> = values.iter().filter_map(|v| v.sql.as_deref()).collect();
        let null = values.iter().any(|v| v.sql.is_none());
        let list = literals.join(", ");
        match (not, literals.is_empty(), null) {
            (false, true, _) => format!("{expr} IS NULL"),
            (false, false, false) => format!("{expr} IN ({list})"),
            (false, false, true) => format!("({expr} IN ({list}) OR {expr} IS NULL)"),
            (true, true, _) => format!("{expr} IS NOT NULL"),
            (true, false, true) => format!("({expr} NOT IN ({list}) AND {expr} IS NOT NULL)"),
            (true, false, false) => format!("({expr} NOT IN ({list}) OR {expr} IS NULL)"),
        }
    }

    /// The catalog columns and SQL texts `view` (plus `extra` conditions) refers to.
    fn used<'v>(&'v self, view: &'v View, extra: &'v [String]) -> (Vec<&'v Column>, Vec<&'v str>) {
        let mut used: Vec<&Column> = view.group.iter().filter_map(|g| self.column(g)).collect();
        let mut text: Vec<&str> = extra.iter().map(String::as_str).collect();
        for step in &view.steps {
            match step {
                Step::Is(f) => used.extend(self.column(&f.column)),
                Step::In { column, .. } => used.extend(self.column(column)),
                Step::Sql(s) => text.push(s),
            }
        }
        (used, text)
    }

    /// The grouped table of `view`: the group columns by name, then [`SAMPLES`],
    /// [`THREAD_NS`], [`BYTES`], and with latency [`LAT_N`], the percentiles and `h0`…`h21`;
    /// sorted by samples. The window is bound as `$from`/`$to` (timestamps).
    pub fn table(&self, view: &View) -> String {
        let (used, text) = self.used(view, &[]);
        let relation = self.relation(&used, &text);
        let mut inner: Vec<String> = Vec::new();
        let mut outer: Vec<String> = Vec::new();
        let mut keys: Vec<String> = Vec::new();
        for (i, g) in view.group.iter().enumerate() {
            let expr = self
                .column(g)
                .map(Column::sql)
                .unwrap_or_else(|| quote_ident(g));
            inner.push(format!("{expr} AS g{i}"));
            outer.push(format!("g{i} AS {}", quote_ident(g)));
            keys.push(format!("g{i}"));
        }
        inner.push("coalesce(count, 1) AS n".into());
        inner.push(format!("{} AS w", thread_ns_expr()));
        inner.push(format!("{} AS b", bytes_expr()));
        outer.push(format!("sum(n) AS {SAMPLES}"));
        outer.push(format!("sum(w) AS {THREAD_NS}"));
        outer.push(format!("sum(b) AS {BYTES}"));
        if view.latency {
            // A row of many events (aggregated IO, folded switches) stands for `count`
            // latencies averaging duration / count: the kernel sums only events of one log2
            // bucket into a row, so the mean falls in their bucket, and it weighs `count`.
            inner.push(format!("{} AS lat", latency_expr()));
            inner.push(format!("{} AS lb", latency_bucket_expr()));
            outer.push(format!(
                "sum(CASE WHEN lat IS NULL THEN 0 ELSE n END) AS {LAT_N}"
            ));
            // One digest for every percentile (the same aggregate, planned once).
            let all: Vec<String> = PERCENTILES.iter().map(|(_, p)| p.to_string()).collect();
            for (i, (name, _)) in PERCENTILES.iter().enumerate() {
                outer.push(format!(
                    "CAST(approx_percentiles(lat, n, {})[{}] AS BIGINT) AS {name}",
                    all.join(", "),
                    i + 1
                ));
            }
            for k in 0..BUCKETS {
                outer.push(format!("sum(CASE WHEN lb = {k} THEN n ELSE 0 END) AS h{k}"));
            }
        }
        let mut conds = self.conditions(view, &[]);
        conds.push("time >= $from AND time < $to".into());
        let group_by = if keys.is_empty() {
            String::new()
        } else {
            format!(" GROUP BY {}", keys.join(", "))
        };
        let mut order = vec![format!("{SAMPLES} DESC")];
        order.extend((0..view.group.len()).map(|i| format!("{} ASC NULLS LAST", i + 1)));
        format!(
            "SELECT {} FROM (SELECT {} FROM {relation} WHERE {}) q{group_by} ORDER BY {} LIMIT {}",
            outer.join(", "),
            inner.join(", "),
            conds.join(" AND "),
            order.join(", "),
            view.limit
        )
    }

    /// Per bucket of `bucket_ns` from `start`, over the whole range (the window is not
    /// applied): bucket index `i`, thread-ns `w`, events `n`.
    pub fn sparkline(&self, view: &View, start: Ns, bucket_ns: Ns) -> String {
        let (used, text) = self.used(view, &[]);
        let relation = self.relation(&used, &text);
        let conds = self.conditions(view, &[]);
        format!(
            "SELECT CAST((CAST(time AS BIGINT) - {start}) / {bucket_ns} AS BIGINT) AS i, \
             sum({}) AS w, sum(coalesce(count, 1)) AS n FROM {relation} WHERE {} GROUP BY 1",
            thread_ns_expr(),
            conds.join(" AND ")
        )
    }

    /// The time the `state` sampling observed per bucket of `bucket_ns` from `start` (in the
    /// window `$from`/`$to` when `windowed`): bucket `i` and `obs`, the periods of the passes
    /// that ran in it (stacks-sql's view `observed`, a pass's period once per host), each
    /// host's passes averaged over the hosts sampled in the bucket. A pass the recorder could
    /// not run on time observed nothing, so `state` rows divided by it are the threads seen per
    /// pass (docs/top.md, "Average active threads"). Not filtered by the view: a pass in which
    /// a group had no thread counts for it as none.
    pub fn observed(&self, start: Ns, bucket_ns: Ns, windowed: bool) -> String {
        let window = if windowed {
            " WHERE time >= $from AND time < $to"
        } else {
            ""
        };
        format!(
            "SELECT i, sum(p) / count(DISTINCT h) AS obs FROM (SELECT \
             CAST((CAST(time AS BIGINT) - {start}) / {bucket_ns} AS BIGINT) AS i, \
             host AS h, time, max(period) AS p FROM observed{window} GROUP BY 1, 2, 3) q \
             GROUP BY i"
        )
    }

    /// [`Planner::sparkline`] of a `state` view, its thread-ns scaled so that divided by the
    /// bucket's length they are divided by the time the bucket observed
    /// ([`Planner::observed`]).
    pub(crate) fn sparkline_observed(&self, view: &View, start: Ns, bucket_ns: Ns) -> String {
        format!(
            "SELECT s.i, CAST(CAST(s.w AS DOUBLE) * {bucket_ns} / coalesce(o.obs, {bucket_ns}) AS BIGINT) AS w, s.n \
             FROM ({}) s LEFT JOIN ({}) o ON s.i = o.i",
            self.sparkline(view, start, bucket_ns),
            self.observed(start, bucket_ns, false)
        )
    }

    /// The latency heatmap of the rows of `view` whose group columns equal `row`, in its
    /// window: per time bucket `i` of `bucket_ns` from `start` and latency bucket `lb`, the
    /// events `n` (`count` each row) and their time in ns `t` (`duration`, times `count` for a
    /// kept row sampled 1 in N: [`latency_time_expr`]).
    pub fn heatmap(&self, view: &View, row: &[Value], start: Ns, bucket_ns: Ns) -> String {
        let extra: Vec<String> = view
            .group
            .iter()
            .zip(row)
            .map(|(g, v)| self.equals(g, v))
            .collect();
        let (used, text) = self.used(view, &extra);
        let relation = self.relation(&used, &text);
        let mut conds = self.conditions(view, &extra);
        conds.push("time >= $from AND time < $to".into());
        conds.push(format!("{} IS NOT NULL", latency_expr()));
        format!(
            "SELECT CAST((CAST(time AS BIGINT) - {start}) / {bucket_ns} AS BIGINT) AS i, {} AS lb, \
             sum(coalesce(count, 1)) AS n, sum(CAST({} AS DOUBLE)) AS t FROM {relation} \
             WHERE {} GROUP BY 1, 2",
            latency_bucket_expr(),
            latency_time_expr(),
            conds.join(" AND ")
        )
    }

    /// The stacks of the rows of `view` whose group columns equal `row` (one value per group
    /// column), in the window: `stack` and its weight `w` (thread-ns, else events).
    /// Where `wakers` links the view's kind (`switch`, or `state` sampled with `switch`),
    /// each stack comes once per waker: `waker_stack`, `waker` (its thread name) and
    /// `waker_tid` of the `wake` row that ended the interval the row waited in, null for rows
    /// no `wake` row explains.
    pub fn stacks(&self, view: &View, row: &[Value], wakers: Wakers) -> String {
        let extra: Vec<String> = view
            .group
            .iter()
            .zip(row)
            .map(|(g, v)| self.equals(g, v))
            .collect();
        self.stacks_where(view, &extra, wakers)
    }

    /// The stacks of thread `tid`'s off-CPU intervals in `view`'s window, with their wakers:
    /// one link down a chain of wakers (`w` in the stack tree).
    pub(crate) fn waker_stacks(&self, view: &View, tid: i64) -> String {
        let view = View {
            kind: Some(stacks_stream::kind::SWITCH.to_string()),
            steps: Vec::new(),
            group: Vec::new(),
            ..view.clone()
        };
        let wakers = Wakers {
            switch: true,
            state: false,
        };
        self.stacks_where(&view, &[format!("tid = {tid}")], wakers)
    }

    fn stacks_where(&self, view: &View, extra: &[String], wakers: Wakers) -> String {
        let (used, text) = self.used(view, extra);
        let mut conds = self.conditions(view, extra);
        conds.push("time >= $from AND time < $to".into());
        let weight = if view
            .kind
            .as_deref()
            .and_then(catalog::weights)
            .is_some_and(|k| k.thread_ns.is_some())
        {
            thread_ns_expr()
        } else {
            "coalesce(count, 1)".to_string()
        };
        // The rows linked to the wake row that ended the interval they waited in: stacks-sql's
        // view `waits` links `switch` rows by their switch-out, `state` rows by the interval
        // they were sampled in (`offcpu_since`, where the store has it).
        let linked = match view.kind.as_deref() {
            Some(stacks_stream::kind::SWITCH) => wakers.switch,
            Some(stacks_stream::kind::STATE) => wakers.state,
            _ => false,
        };
        if !linked {
            let relation = self.relation(&used, &text);
            return format!(
                "SELECT t.stack, q.w, q.n FROM (SELECT stack_id, sum({weight}) AS w, \
                 sum(coalesce(count, 1)) AS n FROM {relation} WHERE {} GROUP BY stack_id) q \
                 LEFT JOIN stack_table t ON q.stack_id = t.stack_id",
                conds.join(" AND ")
            );
        }
        let relation = self.relation_of("waits", &used, &text);
        format!(
            "SELECT t.stack, q.w, q.n, wt.stack AS waker_stack, q.waker, q.waker_tid FROM \
             (SELECT stack_id, wake_stack_id AS waker_stack_id, wake_thread AS waker, \
             wake_tid AS waker_tid, sum({weight}) AS w, sum(coalesce(count, 1)) AS n \
             FROM {relation} WHERE {} \
             GROUP BY stack_id, wake_stack_id, wake_thread, wake_tid) q \
             LEFT JOIN stack_table t ON q.stack_id = t.stack_id \
             LEFT JOIN stack_table wt ON q.waker_stack_id = wt.stack_id",
            conds.join(" AND "),
        )
    }

    /// The stacks of `view` in its window for its flame graph: each distinct stack (`stack`,
    /// `[no stack]` where the rows have none, `[folded short off-CPU intervals]` for the
    /// `switch` rows folding short intervals, as the bundled queries write them) and `w`, the
    /// sum of its rows' `value` (of one kind: CPU or off-CPU ns, bytes, counts), or of their
    /// events over every kind.
    pub fn flame(&self, view: &View) -> String {
        let (used, text) = self.used(view, &[]);
        let relation = self.relation(&used, &text);
        let mut conds = self.conditions(view, &[]);
        conds.push("time >= $from AND time < $to".into());
        let weight = if view.kind.is_some() {
            "value"
        } else {
            "coalesce(count, 1)"
        };
        let short = format!(
            "(kind = {} AND stack_id IS NULL AND coalesce(count, 1) > 1)",
            catalog::quote_text(stacks_stream::kind::SWITCH)
        );
        format!(
            "SELECT stack_or(t.stack, CASE WHEN q.short THEN {folded} ELSE {none} END) AS stack, \
             q.w FROM (SELECT stack_id, {short} AS short, sum({weight}) AS w FROM {relation} \
             WHERE {} GROUP BY stack_id, {short}) q \
             LEFT JOIN stack_table t ON q.stack_id = t.stack_id",
            conds.join(" AND "),
            folded = catalog::quote_text(stacks_stream::frames::SHORT_OFFCPU_FRAME),
            none = catalog::quote_text(stacks_stream::frames::NO_STACK_FRAME),
        )
    }
}

/// Whether SQL `text` mentions identifier `name` as a word.
fn mentions(text: &str, name: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| w.eq_ignore_ascii_case(name))
}

/// A row's thread-nanoseconds by its kind (null where the kind has none).
pub(crate) fn thread_ns_expr() -> String {
    let mut arms = String::new();
    for (k, w) in kinds::shown() {
        if let Some(c) = w.thread_ns {
            arms.push_str(&format!(" WHEN {} THEN {c}", catalog::quote_text(k.name)));
        }
    }
    format!("CASE kind{arms} END")
}

/// A row's bytes by its kind (null where `value` is not bytes).
pub(crate) fn bytes_expr() -> String {
    let names: Vec<String> = kinds::shown()
        .filter(|(k, _)| k.unit == Unit::Bytes)
        .map(|(k, _)| catalog::quote_text(k.name))
        .collect();
    format!("CASE WHEN kind IN ({}) THEN value END", names.join(", "))
}

/// The latency bucket of a row (0 to [`BUCKETS`] - 1; null without a latency).
pub(crate) fn latency_bucket_expr() -> String {
    format!(
        "CASE WHEN {l} IS NULL THEN NULL WHEN {l} < 1024 THEN 0 \
         ELSE least(CAST(log2(CAST({l} AS DOUBLE)) AS BIGINT) - 9, {last}) END",
        l = latency_expr(),
        last = BUCKETS - 1
    )
}

/// The kinds whose `duration` is a latency, quoted: those whose rows hold their events'
/// summed `duration` (`kept: false`), or whose kept rows, sampled 1 in N at the event's start,
/// hold their own and stand for `count` such (`kept: true`, [`kinds::Sampling::KeptOneIn`]).
fn latency_kinds(kept: bool) -> String {
    let names: Vec<String> = kinds::shown()
        .filter(|(k, w)| w.latency && k.one_in_arg().is_some() == kept)
        .map(|(k, _)| catalog::quote_text(k.name))
        .collect();
    if names.is_empty() {
        "NULL".into()
    } else {
        names.join(", ")
    }
}

/// A row's latency in ns by its kind (null where the kind has none): a row of many events
/// by their mean.
pub(crate) fn latency_expr() -> String {
    format!(
        "(CASE WHEN kind IN ({}) THEN duration / coalesce(count, 1) \
         WHEN kind IN ({}) THEN duration END)",
        latency_kinds(false),
        latency_kinds(true)
    )
}

/// The time in ns of the events a row with a latency stands for.
pub(crate) fn latency_time_expr() -> String {
    format!(
        "(CASE WHEN kind IN ({}) THEN duration * coalesce(count, 1) ELSE duration END)",
        latency_kinds(true)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{DataType, Field, Schema};

    fn catalog() -> Vec<Column> {
        catalog::columns(&Schema::new(vec![
            Field::new("comm", DataType::Utf8, false),
            Field::new("pid", DataType::Int32, false),
        ]))
    }

    fn view(group: &[&str]) -> View {
        View {
            kind: Some("state".into()),
            group: group.iter().map(|s| s.to_string()).collect(),
            steps: vec![],
            window: Span { from: 0, to: 10 },
            latency: false,
            limit: 100,
        }
    }

    #[test]
    fn stack_columns_join_the_stack_table_only_when_used() {
        let cols = catalog();
        let p = Planner { columns: &cols };
        assert!(!p.table(&view(&["comm"])).contains("stack_table"));
        let sql = p.table(&view(&["comm", "ufunc"]));
        assert!(sql.contains("stack_user_leaf(stack) AS ufunc"), "{sql}");
        let mut v = view(&["comm"]);
        v.steps.push(Step::Sql("kfunc like 'x%'".into()));
        assert!(p.table(&v).contains("stack_kernel_leaf"));
    }

    #[test]
    fn the_space_menu_includes_or_excludes_values_and_nulls() {
        let cols = catalog();
        let p = Planner { columns: &cols };
        let v = |sql: Option<&str>| Value {
            sql: sql.map(str::to_string),
            shown: sql.unwrap_or("∅").to_string(),
        };
        let two = [v(Some("'a'")), v(Some("'b'"))];
        assert_eq!(p.one_of("comm", &two, false), "comm IN ('a', 'b')");
        // NOT keeps the null rows, unless the null value is excluded too.
        assert_eq!(
            p.one_of("comm", &two, true),
            "(comm NOT IN ('a', 'b') OR comm IS NULL)"
        );
        let with_null = [v(Some("'a'")), v(None)];
        assert_eq!(
            p.one_of("comm", &with_null, false),
            "(comm IN ('a') OR comm IS NULL)"
        );
        assert_eq!(
            p.one_of("comm", &with_null, true),
            "(comm NOT IN ('a') AND comm IS NOT NULL)"
        );
        assert_eq!(p.one_of("comm", &[v(None)], true), "comm IS NOT NULL");
        let step = Step::In {
            column: "comm".into(),
            values: two.to_vec(),
            not: true,
        };
        assert_eq!(step.shown(), "comm NOT IN ('a', 'b')");
    }

    #[test]
    fn drill_downs_compare_typed_values_and_nulls() {
        let cols = catalog();
        let p = Planner { columns: &cols };
        let mut v = view(&["comm"]);
        v.steps.push(Step::Is(Filter {
            column: "pid".into(),
            value: Value {
                sql: Some("42".into()),
                shown: "42".into(),
            },
        }));
        v.steps.push(Step::Is(Filter {
            column: "comm".into(),
            value: Value {
                sql: None,
                shown: "∅".into(),
            },
        }));
        let sql = p.table(&v);
        assert!(
            sql.contains("pid = 42") && sql.contains("comm IS NULL"),
            "{sql}"
        );
        assert!(sql.contains("kind = 'state'"));
    }

    #[test]
    fn words_are_matched_whole() {
        assert!(mentions("ufunc LIKE 'a'", "ufunc"));
        assert!(!mentions("my_ufunc = 1", "ufunc"));
    }
}
