//! The building blocks of queries, registered once as views over `samples` on every session:
//! `waits` (`switch` and `state` rows with the `wake` row that ended their interval) and
//! `observed` (the time each `state` sampling pass stands for). Their SQL is in
//! `stacks-sql/views/`, run as it is by DataFusion here and by DuckDB in explore; the assembled
//! stacks are `stack_table` ([`crate::stack_table`]).

use anyhow::Result;
use datafusion::prelude::SessionContext;

use crate::flat;

/// Each view's name and SQL (a header of `--` lines, with a `-- kinds read through it:` line,
/// the kinds a query reading the view reads besides those it picks itself, then one `SELECT`
/// over `samples`).
pub const VIEWS: &[(&str, &str)] = &[
    ("waits", include_str!("../views/waits.sql")),
    ("observed", include_str!("../views/observed.sql")),
];

/// Register every view of [`VIEWS`] in `ctx`, whose `samples` is registered. A view reading a
/// column the store has not (one written before it) is left out: a query naming it then fails
/// as one naming the column would.
pub(crate) async fn register(ctx: &SessionContext) -> Result<()> {
    for (name, sql) in VIEWS {
        let df = match ctx.sql(sql).await {
            Ok(df) => df,
            Err(e) if e.to_string().contains("No field named") => continue,
            Err(e) => return Err(flat(e).context(format!("registering the view `{name}`"))),
        };
        ctx.register_table(*name, df.into_view()).map_err(flat)?;
    }
    Ok(())
}

/// The SQL of view `name`.
pub fn sql(name: &str) -> Option<&'static str> {
    VIEWS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The kinds a query naming view `name` reads through it (its `-- kinds read through it:` line).
pub fn kinds_through(name: &str) -> Vec<&'static str> {
    sql(name)
        .into_iter()
        .flat_map(|s| s.lines())
        .filter_map(|l| l.strip_prefix("-- kinds read through it:"))
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_view_says_what_it_reads_through_it() {
        for (name, _) in VIEWS {
            let kinds = kinds_through(name);
            assert!(
                !kinds.is_empty(),
                "{name}: no `-- kinds read through it:` line"
            );
            for k in kinds {
                assert!(
                    stacks_stream::kinds::get(k).is_some(),
                    "{name}: `{k}` is not a kind"
                );
            }
        }
    }
}
