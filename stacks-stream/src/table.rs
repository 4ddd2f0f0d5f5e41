//! The one table of row columns: each column's name, type, nullability, unit and meaning,
//! declared once. It makes the [`col`] name constants and [`COLUMNS`], from which the schemas
//! (`raw_fields`, `symbolized_schema`), the recorder's row builder and the testkit rows are
//! built; a test keeps docs/format.md's column tables the same.

/// A column's type, as the schema builds it (`ColumnType::data_type` in schema.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// Nanoseconds since the Unix epoch, UTC.
    Time,
    Utf8,
    Int32,
    Int64,
    UInt64,
    Boolean,
    /// The kernel stack's raw addresses.
    KStack,
    /// The user stack's raw frames.
    UStack,
    /// The kernel symbols of `kstack`.
    KStackSymbols,
    /// A probe's arguments.
    Args,
    /// Symbolized frames.
    Stack,
    /// A 128-bit stack fingerprint.
    StackId,
}

impl ColumnType {
    /// How docs/format.md writes the type (the test keeping its column tables).
    #[cfg(test)]
    fn doc_name(self) -> &'static str {
        match self {
            ColumnType::Time => "Timestamp(ns, UTC)",
            ColumnType::Utf8 => "Utf8",
            ColumnType::Int32 => "Int32",
            ColumnType::Int64 => "Int64",
            ColumnType::UInt64 => "UInt64",
            ColumnType::Boolean => "Boolean",
            ColumnType::KStack => "List<UInt64 `addr`>",
            ColumnType::UStack | ColumnType::Stack => "List<Struct `frame`>",
            ColumnType::KStackSymbols => "List<Struct `symbol`>",
            ColumnType::Args => "List<Int64> (element `arg`, not null)",
            ColumnType::StackId => "FixedSizeBinary(16)",
        }
    }
}

/// Which stream first carries a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Every stream, from stacks-record on.
    Raw,
    /// Symbolized streams (stacks-symbolize).
    Symbolized,
    /// The store's samples files (stacks-pack).
    Stored,
}

/// One row column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub ty: ColumnType,
    pub nullable: bool,
    /// The unit of its values, when one unit fits every kind (`value`'s is per kind: see
    /// `kinds::Kind::unit`).
    pub unit: Option<&'static str>,
    pub stage: Stage,
    /// What it holds on every row that has it; what it holds on a kind's rows is that kind's
    /// (`kinds::Kind::columns`). docs/format.md's text is both: `kinds::column_doc`.
    pub doc: &'static str,
}

macro_rules! columns {
    ($($konst:ident $field:ident: $ty:ident, $null:literal, $unit:expr, $stage:ident, $doc:literal;)*) => {
        /// Column names.
        pub mod col {
            $(
                #[doc = concat!("Column `", stringify!($field), "`. ", $doc)]
                pub const $konst: &str = stringify!($field);
            )*
        }

        /// Every row column, in schema order: the raw columns, then `stack`, then `stack_id`.
        pub const COLUMNS: &[Column] = &[$(Column {
            name: stringify!($field),
            ty: ColumnType::$ty,
            nullable: $null,
            unit: $unit,
            stage: Stage::$stage,
            doc: $doc,
        }),*];
    };
}

/// Calls macro `$callback` with every row column, in schema order, as
/// `CONST field: Type, nullable, unit, Stage, "doc";` (the column's name is `field`): the one
/// list of columns, from which this module and the testkit's fixture rows are made.
#[macro_export]
macro_rules! with_columns {
    ($callback:ident) => {
        $callback! {
            TIME time: Time, false, Some("ns"), Raw,
                r#"when the event happened (see Clock)"#;
            KIND kind: Utf8, false, None, Raw,
                r#"event kind, see below"#;
            PID pid: Int32, false, None, Raw,
                r#"process id (thread group id)"#;
            TID tid: Int32, false, None, Raw,
                r#"thread id"#;
            COMM comm: Utf8, false, None, Raw,
                r#"process name (the thread group leader's `comm`, ≤ 15 bytes)"#;
            THREAD thread: Utf8, false, None, Raw,
                r#"thread name (`comm` of the thread, ≤ 15 bytes)"#;
            HOST host: Utf8, true, None, Raw,
                r#"the recording machine's host name (as `stacks.host`), on every row: stores of many hosts keep it"#;
            CGROUP cgroup: Utf8, true, None, Raw,
                r#"the thread's cgroup v2 path (`/system.slice/nginx.service`, a container's scope): the service it ran in; null when no cgroup2 file system is mounted or the cgroup is gone"#;
            SPAN_ID span_id: UInt64, true, None, Raw,
                r#"the `tracing` span the thread was in at the event (programs using the tracing-stacks layer, see [spans.md](spans.md)): a process-unique span id; null when in no span, not such a program, or `--no-spans`"#;
            PARENT_SPAN_ID parent_span_id: UInt64, true, None, Raw,
                r#"that span's parent span; null for a root span"#;
            SPAN_NAME span_name: Utf8, true, None, Raw,
                r#"that span's name (at most 52 bytes are read; longer names are cut at a character boundary)"#;
            TRACE_ID trace_id: Utf8, true, None, Raw,
                r#"that span's trace: 32 lowercase hex digits (the OpenTelemetry trace id when the program sets one; tracing-stacks uses its root span's id)"#;
            TASK task: Utf8, true, None, Raw,
                r#"the asyncio task the thread was running at the event (CPython 3.14+, read like its Python frames, see [python-frames.md](python-frames.md)): the task's name (`Task.get_name()`: `Task-N` when unnamed); null when running no task, not such a program, on `state` rows of `running` threads (no stack), or with `--no-python`"#;
            TASK_CHAIN task_chain: Utf8, true, None, Raw,
                r#"that task and the tasks awaiting it (one awaiting it, the one awaiting that, …), outermost first, `;`-joined (`main;serve;handle`)"#;
            CPU cpu: Int32, false, None, Raw,
                r#"CPU the event happened on"#;
            VALUE value: Int64, false, None, Raw,
                r#"the event's weight; meaning per kind below"#;
            KSTACK kstack: KStack, true, None, Raw,
                r#"kernel stack, leaf first, raw addresses; null when not requested. The kernel's unwind (`bpf_get_stack`), or for tracepoint kinds the same addresses from the recorder's cache of its unwinds where the stack holds them in the same places (docs/cost.md, "Kernel stacks"; `--kernel-stacks-unwound` turns it off)"#;
            KSTACK_ERROR kstack_error: Int32, true, None, Raw,
                r#"when the kernel stack could not be captured: the negative errno from `bpf_get_stack` (the list is then empty); `-11` (EAGAIN) on a `state` row whose thread ran while the pass read its stacks (woken meanwhile: what was read may be torn, so neither stack is kept)"#;
            USTACK ustack: UStack, true, None, Raw,
                r#"user stack, leaf first; null when not requested"#;
            USTACK_ERROR ustack_error: Int32, true, None, Raw,
                r#"as `kstack_error`, for the user stack; also `-11` (EAGAIN) on a `switch` interval whose user stack, taken once it is known to be kept, was gone by then (its switch-in unseen; at the end, a thread not in a system call) (docs/unwinding.md), and on a `state` row whose thread ran while the pass read its stacks"#;
            USTACK_UNWIND ustack_unwind: Utf8, true, None, Raw,
                r#"how the user stack was unwound: `fp` (frame pointers: `u` stacks, or a `d` stack whose CFI unwind gave nothing past its first frame), `dwarf` (`d`: by the mapped files' CFI) or `dwarf+fp` (`d`: by CFI, then continued by the frame-pointer walk where the copied stack ended); null when no user stack was taken"#;
            USTACK_TRUNCATED ustack_truncated: Boolean, true, None, Raw,
                r#"true: the user stack ends before its root (a `d` stack the unwinder could not finish and frame pointers could not continue, or any stack cut at 127 frames); false: a `d` stack unwound by CFI to its root; null: not known (a frame-pointer walk cannot tell where it ends)"#;
            KSTACK_SYMBOLS kstack_symbols: KStackSymbols, true, None, Raw,
                r#"the kernel symbol of each `kstack` address, same positions, resolved by the recorder from the running kernel's kallsyms (see below)"#;
            DURATION duration: Int64, true, Some("ns"), Raw,
                r#"ns"#;
            COUNT count: Int64, true, None, Raw,
                r#"how many events the row stands for: 1, or more for rows that fold or aggregate events (see Aggregated rows)"#;
            STATE state: Utf8, true, None, Raw,
                r#""#;
            WAKER waker: Int32, true, None, Raw,
                r#""#;
            WAKEE wakee: Int32, true, None, Raw,
                r#""#;
            OFFCPU_SINCE offcpu_since: Time, true, Some("ns"), Raw,
                r#""#;
            OP op: Utf8, true, None, Raw,
                r#""#;
            SYSCALL syscall: Utf8, true, None, Raw,
                r#""#;
            FD fd: Int32, true, None, Raw,
                r#""#;
            PATH path: Utf8, true, None, Raw,
                r#""#;
            DEV dev: Utf8, true, None, Raw,
                r#""#;
            PROTOCOL protocol: Utf8, true, None, Raw,
                r#""#;
            LOCAL local: Utf8, true, None, Raw,
                r#""#;
            REMOTE remote: Utf8, true, None, Raw,
                r#""#;
            RSS rss: Int64, true, Some("bytes"), Raw,
                r#""#;
            CHILD child: Int32, true, None, Raw,
                r#""#;
            ERRNO errno: Int32, true, None, Raw,
                r#""#;
            EXIT_CODE exit_code: Int32, true, None, Raw,
                r#""#;
            CAUSE cause: Utf8, true, None, Raw,
                r#""#;
            PROBE probe: Utf8, true, None, Raw,
                r#""#;
            ARGS args: Args, true, None, Raw,
                r#""#;
            MODE mode: Utf8, true, None, Raw,
                r#""#;
            SUBMITTER submitter: Int32, true, None, Raw,
                r#""#;
            STACK stack: Stack, true, None, Symbolized,
                r#"kernel frames (leaf → root) followed by user frames (leaf → root); null when neither stack was requested"#;
            STACK_ID stack_id: StackId, true, None, Stored,
                r#"a 128-bit fingerprint of the whole `stack` (every field of every frame, in order; `stacks_stream::stack_key`); for a stream stored without symbolization, of its `kstack` and `ustack`; null where there is no stack. Equal stacks have equal ids, in every file and on every host; two different stacks share one with a probability around 2^-128. Queries group and join by it without decoding stacks; `stacks-query` computes it (`stack_key(stack)`) for Parquet files that lack it"#;        }
    };
}

with_columns!(columns);

/// The columns of a stage's streams that it adds (`Raw`: every raw column).
pub fn of_stage(stage: Stage) -> impl Iterator<Item = &'static Column> {
    COLUMNS.iter().filter(move |c| c.stage == stage)
}

/// The column named `name`.
pub fn column(name: &str) -> Option<&'static Column> {
    COLUMNS.iter().find(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/format.md, from the crate's directory at run time when cargo says it (a test binary
    /// built from a clone at another path keeps that path compiled in).
    fn format_md() -> std::path::PathBuf {
        std::env::var_os("CARGO_MANIFEST_DIR")
            .map(std::path::PathBuf::from)
            .filter(|p| p.is_dir())
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
            .join("../docs/format.md")
    }

    /// docs/format.md's tables of row columns, as lines, in order.
    fn format_md_lines() -> Vec<String> {
        let path = format_md();
        let text = std::fs::read_to_string(path).expect("docs/format.md");
        let mut out = Vec::new();
        let mut in_rows = false;
        for line in text.lines() {
            if line.starts_with("## ") || line.starts_with("### ") {
                in_rows = line.starts_with("## Raw rows") || line.starts_with("## Symbolized rows");
            }
            if in_rows && line.starts_with("| `") {
                out.push(line.to_string());
            }
        }
        out
    }

    fn rendered(c: &Column) -> String {
        format!(
            "| `{}` | {} | {} | {} |",
            c.name,
            c.ty.doc_name(),
            if c.nullable { "yes" } else { "no" },
            crate::kinds::column_doc(c)
        )
    }

    /// The column table and docs/format.md say the same, line for line. `STACKS_BLESS=1`
    /// writes the table's lines into docs/format.md instead (same count of lines).
    #[test]
    fn format_md_lists_the_column_table() {
        let want: Vec<String> = COLUMNS.iter().map(rendered).collect();
        let have = format_md_lines();
        if std::env::var_os("STACKS_BLESS").is_some() && want.len() == have.len() {
            let path = format_md();
            let mut text = std::fs::read_to_string(&path).expect("docs/format.md");
            for (old, new) in have.iter().zip(&want) {
                text = text.replacen(old.as_str(), new, 1);
            }
            std::fs::write(&path, text).expect("writing docs/format.md");
            return;
        }
        let mut diff = String::new();
        for i in 0..want.len().max(have.len()) {
            match (want.get(i), have.get(i)) {
                (Some(w), Some(h)) if w == h => {}
                (w, h) => {
                    diff.push_str(&format!(
                        "row {i}:\n  table (stacks-stream/src/table.rs): {}\n  docs/format.md:                   {}\n",
                        w.map_or("(none)", String::as_str),
                        h.map_or("(none)", String::as_str)
                    ));
                }
            }
        }
        assert!(
            diff.is_empty(),
            "docs/format.md's column tables differ from the column table:\n{diff}"
        );
    }

    /// docs/format.md's table of `reason` values lists every one, and no other.
    #[test]
    fn format_md_lists_every_reason() {
        let path = format_md();
        let text = std::fs::read_to_string(path).expect("docs/format.md");
        let start = text
            .find("`reason` values")
            .expect("a table of reason values");
        let listed: Vec<&str> = text[start..]
            .lines()
            .skip_while(|l| !l.starts_with("| value"))
            .skip(2)
            .take_while(|l| l.starts_with("| `"))
            .filter_map(|l| l.split('`').nth(1))
            .collect();
        let values: Vec<&str> = crate::Unresolved::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(listed, values, "docs/format.md's reason values");
    }

    #[test]
    fn names_are_unique_and_constants_match() {
        for (i, c) in COLUMNS.iter().enumerate() {
            assert!(
                COLUMNS[i + 1..].iter().all(|d| d.name != c.name),
                "{} twice",
                c.name
            );
        }
        assert_eq!(column(col::ERRNO).map(|c| c.ty), Some(ColumnType::Int32));
        assert_eq!(of_stage(Stage::Symbolized).count(), 1);
    }
}
