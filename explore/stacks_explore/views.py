"""Where a stacks store's files are (a directory or an s3:// URL) and the DuckDB views over them.

`create_views` lists the samples files and their stacks (and frames) files and defines the
views every question in store.py asks, as stacks-query does (docs/queries.md):

- `samples`: every stored row without its stacks (`stack_id` instead);
- `stack_table`: one row per distinct `stack_id` (`stack`, `folded`, `leaf`, `depth`, and
  `kernel_frames`, how many of the stack's frames are kernel frames);
- `stacks`: `samples` left-joined with `stack_table` on `stack_id`;
- `recordings`: one row per samples file with its `stacks.*` metadata;
- `waits` and `observed`: the building blocks of stacks-sql/views/ over `samples`, their text
  run as it is (bundled.py).

A change of the store's layout is an edit of this file alone. Stacks files of the frames layout
hold each stack as `frame_ids` into their file set's frames file (docs/format.md, "The store");
their stacks are assembled here, with the names their frames files hold (stacks-pack names each
frame once, as every stacks tool does); stacks files of the earlier pair layout hold them whole.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

# The repository's root: the demo writes its store to `out/` there.
REPO = Path(__file__).resolve().parents[2]

# The fields of a frame (docs/format.md, `stack`), as a frames file has them.
FRAME_FIELDS = [
    "function", "file", "line", "column", "inlined", "kernel", "module", "build_id",
    "offset", "addr", "error", "symbol", "reason",
]


# The name of a frame of a frames file written before its `name` column (stacks-pack writes
# each frame's name since): stacks_stream::frames::folded_name, the one rule, as SQL over the
# frame's columns. Only those files are named here; the Rust rule is the truth.
OLD_NAME = (
    "translate(coalesce(nullif(function, ''), CASE "
    "WHEN kernel THEN printf('[kernel 0x%x]', addr) "
    "WHEN \"offset\" IS NOT NULL THEN '[' || regexp_replace(regexp_extract("
    "coalesce(nullif(module, ''), 'unknown'), '[^/]*$'), '^\\[(.*)\\]$', '\\1') || "
    "printf('+0x%x]', \"offset\") "
    "ELSE printf('[0x%x]', addr) END), ';' || chr(10) || chr(13), ':  ')"
)


class StoreError(Exception):
    """The store cannot be read: missing, empty, or not a stacks store. Its message is one sentence."""


def default_location(default: str = "out") -> str:
    """`$STACKS_STORE`, else `default` at the repository's root (the demo writes `out/`, and `out-spans/` for its tracing example)."""
    return os.environ.get("STACKS_STORE") or str(REPO / default)


def hint() -> str:
    """Where a store comes from, for the end of a StoreError's sentence."""
    return (
        "record one with scripts/demo (it writes out/ at the repository's root) "
        "or set STACKS_STORE to a store directory or an s3:// URL"
    )


def _s3_filesystem():
    """fsspec's S3 file system, configured from the AWS_* variables stacks-pack and stacks-query read."""
    import s3fs

    env = os.environ
    client = {}
    if env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"):
        client["region_name"] = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    kwargs = {"client_kwargs": client}
    endpoint = env.get("AWS_ENDPOINT") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        kwargs["endpoint_url"] = endpoint
    if env.get("AWS_ACCESS_KEY_ID"):
        kwargs["key"] = env["AWS_ACCESS_KEY_ID"]
        kwargs["secret"] = env.get("AWS_SECRET_ACCESS_KEY")
        if env.get("AWS_SESSION_TOKEN"):
            kwargs["token"] = env["AWS_SESSION_TOKEN"]
    return s3fs.S3FileSystem(**kwargs)


def _list_local(root: Path) -> list[str]:
    """The samples files under `root`, skipping unfinished (dot-named) files and directories."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".samples.parquet") and not name.startswith("."):
                path = Path(dirpath) / name
                if path.stat().st_size > 0:
                    found.append(str(path))
    return found


def create_views(con: duckdb.DuckDBPyConnection, location: str) -> None:
    """Read the store at `location` into `con`: the views `samples`, `stack_table`, `stacks`, `recordings`, and stacks-sql's `waits` and `observed`."""
    if location.startswith("s3://"):
        fs = _s3_filesystem()
        con.register_filesystem(fs)
        keys = []
        try:
            # Directory by directory (a delimited listing per prefix): S3-compatible servers agree on it.
            for top, dirs, files in fs.walk(location, detail=False):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                keys += [f"{top.rstrip('/')}/{f}" for f in sorted(files) if not f.startswith(".")]
        except (FileNotFoundError, PermissionError, OSError) as e:
            raise StoreError(f"{location}: cannot list the store ({e}): {hint()}.") from None
        names = set(keys)
        samples = ["s3://" + k for k in keys if k.endswith(".samples.parquet")]
        missing = [f for f in samples if f[5:].replace(".samples.parquet", ".stacks.parquet") not in names]
        framed = {f for f in samples if f[5:].replace(".samples.parquet", ".frames.parquet") in names}
    else:
        root = Path(location)
        if not root.exists():
            raise StoreError(f"{location}: no such store directory: {hint()}.")
        if not root.is_dir():
            raise StoreError(f"{location}: not a directory of stacks-pack files: {hint()}.")
        samples = _list_local(root)
        missing = [f for f in samples if not Path(f.replace(".samples.parquet", ".stacks.parquet")).exists()]
        framed = {f for f in samples if Path(f.replace(".samples.parquet", ".frames.parquet")).exists()}
    if not samples:
        raise StoreError(f"{location}: no stacks store here (no *.samples.parquet files): {hint()}.")
    if missing:
        raise StoreError(f"{missing[0]}: its stacks file is missing (the store is damaged).")

    def files(paths: list[str]) -> str:
        return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"

    def read(paths: list[str]) -> str:
        return f"read_parquet({files(paths)}, union_by_name = true, hive_partitioning = false)"

    con.execute(f"CREATE VIEW samples AS SELECT * FROM {read(samples)}")
    parts = []
    # Frames layout: each stack's frames from its file set's frames file, in `frame_ids` order.
    sets = [f for f in samples if f in framed]
    if sets:
        frame_files = read([f.replace(".samples.parquet", ".frames.parquet") for f in sets])
        stack_files = read([f.replace(".samples.parquet", ".stacks.parquet") for f in sets])
        fields = ", ".join(f'"{c}"' for c in FRAME_FIELDS)
        columns = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {frame_files}").fetchall()}
        # Each frame's name is stacks-pack's (the `name` column, stacks_stream::frames, the one
        # naming rule); frames files written before the column get OLD_NAME instead.
        name = f"coalesce(name, {OLD_NAME})" if "name" in columns else OLD_NAME
        con.execute(
            f"""CREATE VIEW framed_stacks AS
            WITH refs AS (
                SELECT stack_id, set_id, unnest(frame_ids) AS frame_id,
                       generate_subscripts(frame_ids, 1) AS i
                FROM {stack_files}),
            frames AS (
                SELECT set_id, frame_id, struct_pack({fields}) AS frame, {name} AS name
                FROM {frame_files}),
            assembled AS (
                SELECT r.stack_id, list(f.frame ORDER BY r.i) AS stack, list(f.name ORDER BY r.i) AS names
                FROM refs r JOIN frames f USING (set_id, frame_id)
                GROUP BY r.stack_id, r.set_id)
            SELECT k.stack_id, coalesce(a.stack, []) AS stack, coalesce(a.names, []) AS names
            FROM (SELECT DISTINCT ON (stack_id) stack_id, set_id FROM {stack_files}) k
            LEFT JOIN (SELECT DISTINCT ON (stack_id) * FROM assembled) a USING (stack_id)"""
        )
        parts.append(
            """SELECT stack_id, stack,
                array_to_string(list_reverse(names), ';') AS folded,
                names[1] AS leaf,
                CAST(len(stack) AS INTEGER) AS depth
            FROM framed_stacks"""
        )
    # Pair layout: whole stacks with their `folded`, `leaf` and `depth`. A store written without
    # symbolization has no `stack` column (and a null `folded`): no kernel frames counted then.
    whole = [f.replace(".samples.parquet", ".stacks.parquet") for f in samples if f not in framed]
    if whole:
        stack_files = read(whole)
        columns = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {stack_files}").fetchall()}
        stack = "stack" if "stack" in columns else "CAST(NULL AS STRUCT(\"function\" VARCHAR, kernel BOOLEAN)[])"
        folded = "folded" if "folded" in columns else "CAST(NULL AS VARCHAR)"
        leaf = "leaf" if "leaf" in columns else "CAST(NULL AS VARCHAR)"
        depth = "depth" if "depth" in columns else "CAST(NULL AS INTEGER)"
        parts.append(
            f"SELECT stack_id, {stack} AS stack, {folded} AS folded, {leaf} AS leaf, {depth} AS depth "
            f"FROM (SELECT DISTINCT ON (stack_id) * FROM {stack_files})"
        )
    # Stack ids repeat across file sets: each distinct stack once.
    union = " UNION ALL BY NAME ".join(f"({p})" for p in parts)
    con.execute(
        f"""CREATE VIEW stack_table AS
        SELECT *, coalesce(len(list_filter(stack, lambda f: f.kernel)), 0) AS kernel_frames
        FROM (SELECT DISTINCT ON (stack_id) * FROM ({union}))"""
    )
    # Every stored column and every stack column, as stacks-query's `stacks` view, then `folded`,
    # `leaf`, `depth` and `kernel_frames`.
    con.execute(
        "CREATE VIEW stacks AS SELECT s.*, t.* EXCLUDE (stack_id) FROM samples s LEFT JOIN stack_table t USING (stack_id)"
    )
    from .bundled import create_views as create_sql_views

    create_sql_views(con)
    con.execute(
        f"""CREATE VIEW recordings AS
        SELECT file_name AS file,
            max(CASE WHEN decode(key) = 'stacks.host' THEN decode(value) END) AS host,
            max(CASE WHEN decode(key) = 'stacks.events' THEN decode(value) END) AS events,
            max(CASE WHEN decode(key) = 'stacks.kernel_release' THEN decode(value) END) AS kernel,
            max(CASE WHEN decode(key) = 'stacks.stage' THEN decode(value) END) AS stage,
            max(CASE WHEN decode(key) = 'stacks.tools' THEN decode(value) END) AS tools
        FROM parquet_kv_metadata({files(samples)})
        GROUP BY file_name ORDER BY file_name"""
    )
