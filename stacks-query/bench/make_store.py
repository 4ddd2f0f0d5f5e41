#!/usr/bin/env python3
# stacks-query/bench/make_store.py — writes the same profile rows as two stores, one in the
# first layout (stacks inline in every row) and one as samples/stacks pairs, to time
# `stacks-query -d STORE cpu | stacks-pprof` on each. Needs pyarrow and a stacks-query binary.
"""Usage: make_store.py FIXTURE.parquet STACKS_QUERY OUT_DIR [ROWS] [STACKS]

FIXTURE.parquet: any first-layout file (its schema and metadata are reused). Writes
OUT_DIR/inline and OUT_DIR/pairs, ROWS rows (default 10,000,000) in files of 1,000,000 rows
(row groups of 125,000), drawing from STACKS distinct stacks (default 12,000; 12 to 48 frames
from 3,000 function names, with their raw ustack) with a long-tailed frequency. stack_id and
folded/leaf/depth are computed by STACKS_QUERY itself (a template without stack_id is read as
a first-layout file without one, and its stack_table written out).
"""

import os
import random
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

STACK_COLUMNS = ("kstack", "ustack", "kstack_symbols", "stack")


def main():
    fixture, query, out = sys.argv[1], sys.argv[2], sys.argv[3]
    rows = int(sys.argv[4]) if len(sys.argv) > 4 else 10_000_000
    n_stacks = int(sys.argv[5]) if len(sys.argv) > 5 else 12_000
    rng = random.Random(14)
    schema = pq.read_schema(fixture)
    schema = schema.remove(schema.get_field_index("stack_id"))
    names = [f"app::module_{i % 40:02}::Type{i % 97}::function_{i:04}" for i in range(3000)]
    stacks, ustacks = [], []
    for s in range(n_stacks):
        depth = rng.randint(12, 48)
        frames, raw = [], []
        for d in range(depth):
            # Leaf first; the two outermost frames are the same everywhere (start, main).
            k = rng.randrange(len(names)) if d < depth - 2 else d - depth + 3
            addr = 0x400000 + k * 64 + (rng.randrange(64) if d == 0 else 0)
            frames.append(dict(function=names[k], file=f"src/module_{k % 40}.rs",
                               line=k % 500 + 1, column=None, inlined=False,
                               kernel=False, module="/usr/bin/app", build_id="abcd",
                               offset=addr - 0x400000, addr=addr, error=None, symbol=names[k]))
            raw.append(dict(addr=addr, module="/usr/bin/app", build_id="abcd",
                            offset=addr - 0x400000, error=None))
        stacks.append(frames)
        ustacks.append(raw)
    n = n_stacks
    cols = {}
    for f in schema:
        if f.name == "stack":
            cols[f.name] = pa.array(stacks, type=f.type)
        elif f.name == "ustack":
            cols[f.name] = pa.array(ustacks, type=f.type)
        elif f.name == "time":
            cols[f.name] = pa.array([0] * n, type=pa.int64()).cast(f.type)
        elif f.name == "kind":
            cols[f.name] = pa.array(["profile"] * n, type=f.type)
        elif f.name in ("pid", "tid"):
            cols[f.name] = pa.array([1000 + s % 8 for s in range(n)], type=f.type)
        elif f.name in ("comm", "thread"):
            cols[f.name] = pa.array([f"app{s % 8}" for s in range(n)], type=f.type)
        elif f.name == "cpu":
            cols[f.name] = pa.array([0] * n, type=f.type)
        elif f.name == "value":
            cols[f.name] = pa.array([10_101_010] * n, type=f.type)
        else:
            cols[f.name] = pa.nulls(n, type=f.type)
    template = pa.table(cols, schema=schema)
    tdir = os.path.join(out, "template")
    os.makedirs(tdir, exist_ok=True)
    pq.write_table(template, os.path.join(tdir, "template.parquet"))
    for name, sql in (("keyed", "SELECT * FROM stacks"), ("distinct", "SELECT * FROM stack_table")):
        with open(os.path.join(out, f"{name}.parquet"), "wb") as f:
            subprocess.run([query, "-d", tdir, "-c", sql, "-f", "parquet"], stdout=f, check=True)
    keyed = pq.read_table(os.path.join(out, "keyed.parquet"))
    keyed = keyed.replace_schema_metadata(pq.read_schema(fixture).metadata)
    distinct = pq.read_table(os.path.join(out, "distinct.parquet"))
    meta = keyed.schema.metadata
    per_file, chunk = 1_000_000, 125_000
    t0 = 1_700_000_000_000_000_000
    row = 0
    for f_no in range(rows // per_file):
        base = f"stacks-20231114T221320Z-bench-{f_no:06}"
        for d in ("inline", "pairs"):
            os.makedirs(os.path.join(out, d, "date=2023-11-14"), exist_ok=True)
        inline_w = samples_w = None
        used = set()
        for c in range(per_file // chunk):
            # Long-tailed: a few stacks hot, most seen rarely.
            idx = [min(int(rng.paretovariate(0.6)) - 1, n - 1) if rng.random() < 0.7
                   else rng.randrange(n) for _ in range(chunk)]
            used.update(idx)
            t = keyed.take(pa.array(idx))
            times = pa.array(range(t0 + row * 100_000, t0 + (row + chunk) * 100_000, 100_000),
                             type=pa.int64()).cast(keyed.schema.field("time").type)
            tids = pa.array([1000 + rng.randrange(64) for _ in range(chunk)], type=pa.int32())
            t = t.set_column(t.schema.get_field_index("time"), keyed.schema.field("time"), times)
            t = t.set_column(t.schema.get_field_index("tid"), keyed.schema.field("tid"), tids)
            row += chunk
            samples = t.drop_columns([c for c in STACK_COLUMNS if c in t.column_names])
            if inline_w is None:
                inline_w = pq.ParquetWriter(
                    os.path.join(out, "inline", "date=2023-11-14", f"{base}.parquet"),
                    t.schema.with_metadata(meta), compression="zstd")
                samples_w = pq.ParquetWriter(
                    os.path.join(out, "pairs", "date=2023-11-14", f"{base}.samples.parquet"),
                    samples.schema.with_metadata(meta), compression="zstd")
            inline_w.write_table(t, row_group_size=chunk)
            samples_w.write_table(samples, row_group_size=chunk)
        inline_w.close()
        samples_w.close()
        ids = keyed.column("stack_id").take(pa.array(sorted(used)))
        st = distinct.filter(pc.is_in(distinct.column("stack_id"), value_set=ids))
        pq.write_table(st.replace_schema_metadata(meta),
                       os.path.join(out, "pairs", "date=2023-11-14", f"{base}.stacks.parquet"),
                       compression="zstd")
        print(f"file {f_no}: {len(used)} distinct stacks", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
