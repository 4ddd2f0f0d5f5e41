//! Answers into the app state: what a query job ([`crate::runner`]) computed goes where the
//! key that asked for it wanted — the table, the sparkline, or a pane's answer (which says
//! itself what it does to the screen: [`crate::views::Answer`]). Errors go to the status
//! line; the screen stays.

use std::time::Duration;

use anyhow::Result;

use crate::app::{App, Spark};
use crate::session::SparkPlan;
use crate::table::Table;
use crate::views::Answer;

/// What a query job computed.
pub enum Reply {
    Table(Table, Duration),
    Spark(Vec<f64>),
    Pane(Answer),
}

/// What a query job was started for: where its answer goes.
#[derive(Debug, Clone)]
pub enum Want {
    /// The table (an SQL filter was just added: dropped again if the query fails).
    Table {
        new_filter: bool,
    },
    Spark(SparkPlan),
    /// What a key opened (a pane's [`crate::views::Job`]): what the screen says is computed,
    /// the start of its errors, and whether it is a live refresh nobody asked for.
    Pane {
        label: &'static str,
        error: &'static str,
        quiet: bool,
    },
}

impl Want {
    /// What the screen says is being computed.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Want::Table { .. } => "the table",
            Want::Spark(_) => "the sparkline",
            Want::Pane { label, .. } => label,
        }
    }

    /// A live refresh: not shown as computed, its errors and cancellation not told.
    pub(crate) fn quiet(&self) -> bool {
        matches!(self, Want::Pane { quiet: true, .. })
    }
}

/// Put `reply`, computed for `want`, into `app`.
pub fn apply(app: &mut App, want: Want, reply: Result<Reply>) {
    let reply = match reply {
        Ok(r) => r,
        Err(e) => return failed(app, &want, e),
    };
    match (want, reply) {
        (Want::Table { .. }, Reply::Table(table, took)) => {
            app.timing = format!("{} rows · {} ms", table.rows.len(), took.as_millis());
            app.table = Some(table);
            app.cursor = app.cursor.min(app.rows().len().saturating_sub(1));
        }
        (Want::Spark(plan), Reply::Spark(values)) => {
            app.spark = Spark {
                start: plan.start,
                bucket: plan.bucket,
                values,
                threads: plan.threads,
            };
            app.spark_key = Some(plan.key);
        }
        (Want::Pane { .. }, Reply::Pane(answer)) => answer(&mut app.screen()),
        (want, _) => app.error(format!("{want:?}: an answer of another query")),
    }
}

/// A query for `want` failed: say why.
fn failed(app: &mut App, want: &Want, e: anyhow::Error) {
    match want {
        Want::Table { new_filter } => {
            let dropped =
                *new_filter && matches!(app.view.steps.last(), Some(crate::view::Step::Sql(_)));
            if dropped {
                app.view.steps.pop();
            }
            let text = format!("{e:#}");
            // The generated SQL's position and DataFusion's list of every field say nothing
            // to someone who typed a condition.
            let text = text.split(". Valid fields are").next().unwrap_or(&text);
            let text = text.strip_prefix("the table:").map_or(text, |rest| {
                rest.split_once(": ").map_or(rest, |(_, after)| after)
            });
            app.error(format!(
                "{}{text}",
                if dropped { "filter dropped: " } else { "" }
            ));
        }
        Want::Spark(_) => app.error(format!("sparkline: {e:#}")),
        // A live refresh: the last answer stays; the next refresh tries again.
        Want::Pane { quiet: true, .. } => {}
        Want::Pane { error, .. } => app.error(format!("{error}: {e:#}")),
    }
}
