//! stacks-pack's file sets, read by other tools: every samples file has its stacks and frames
//! files, which hold exactly the distinct stacks of its rows and their distinct frames;
//! pyarrow and DuckDB, joining the three with plain SQL, get the input's totals per stack; a
//! dictionary-encoded stream and the same rows as a plain (schema version 1) stream give
//! identical stores.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, Int32Array, RecordBatch, UInt32Array};
use arrow_schema::{Field, Schema};
use serde_json::Value;
use stacks_stream::{col, dict, meta};
use stacks_testkit::recording as fixture;
use stacks_tests::{Row, check, python, run_tool, scratch};

/// Per file set under a directory (pyarrow): the samples file's rows and stack ids, whether
/// its stacks file exists and holds exactly those ids, each once, sorted by their frames root
/// first, and whether its frames file holds exactly the frames those stacks use, each once,
/// numbered by row; then, by DuckDB over the whole directory, the joined total value per
/// folded stack (frames named as the stack functions name them) and the rows without a stack.
const PAIRS: &str = r#"
import json, os, sys
import pyarrow.parquet as pq
import duckdb
d = sys.argv[1]
pairs = []
for root, dirs, names in os.walk(d):
    dirs[:] = [x for x in dirs if not x.startswith('.')]
    for n in sorted(names):
        if not n.endswith('.samples.parquet') or n.startswith('.'):
            continue
        s = pq.read_table(os.path.join(root, n))
        base = os.path.join(root, n[:-len('.samples.parquet')])
        has = os.path.exists(base + '.stacks.parquet') and os.path.exists(base + '.frames.parquet')
        ids = [x for x in s.column('stack_id').to_pylist() if x is not None]
        k = pq.read_table(base + '.stacks.parquet') if has else None
        f = pq.read_table(base + '.frames.parquet') if has else None
        kids = k.column('stack_id').to_pylist() if has else []
        lists = k.column('frame_ids').to_pylist() if has else []
        fids = f.column('frame_id').to_pylist() if has else []
        used = {i for l in lists for i in l}
        sets = set(k.column('set_id').to_pylist()) | set(f.column('set_id').to_pylist()) if has else set()
        roots = [list(reversed(l)) for l in lists]
        pairs.append(dict(name=n, rows=s.num_rows, stacks=len(kids), has_stacks=has,
                          exact=set(ids) == set(kids), unique=len(set(kids)) == len(kids),
                          sorted=roots == sorted(roots), frames_exact=used == set(fids),
                          frames_numbered=fids == list(range(len(fids))), one_set=len(sets) == 1,
                          columns=s.column_names, stack_columns=k.column_names if has else []))
con = duckdb.connect()
sql = """
    WITH refs AS (
        SELECT stack_id, set_id, unnest(frame_ids) AS frame_id, generate_subscripts(frame_ids, 1) AS i
        FROM '{0}/**/*.stacks.parquet'),
    named AS (
        SELECT r.stack_id, r.set_id, r.i,
               f.name
        FROM refs r JOIN '{0}/**/*.frames.parquet' f USING (set_id, frame_id)),
    stacks AS (
        SELECT DISTINCT ON (stack_id) stack_id, array_to_string(list(name ORDER BY i DESC), ';') AS folded
        FROM named GROUP BY stack_id, set_id)
    SELECT k.folded, sum(s.value) FROM '{0}/**/*.samples.parquet' s JOIN stacks k USING (stack_id)
    GROUP BY 1""".format(d)
totals = {f: int(v) for f, v in con.execute(sql).fetchall()}
stackless = con.execute(
    "select count(*) from '{0}/**/*.samples.parquet' where stack_id is null".format(d)).fetchone()[0]
rows = con.execute("select count(*) from '{0}/**/*.samples.parquet'".format(d)).fetchone()[0]
print(json.dumps(dict(pairs=pairs, totals=totals, stackless=stackless, rows=rows)))
"#;

fn pairs_of(dir: &Path) -> Value {
    let out = python(PAIRS, &[dir.to_str().unwrap()]);
    check(&out, "pyarrow and DuckDB reading the pairs");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The input's total value per folded stack (root first, as every stacks tool folds it) and
/// its stackless rows.
fn expected(rows: &[Row]) -> (BTreeMap<String, i64>, usize) {
    let mut totals = BTreeMap::new();
    let mut stackless = 0;
    for r in rows {
        match r.names() {
            Some(names) => {
                let folded = stacks_stream::frames::fold(names.iter().rev().map(String::as_str));
                *totals.entry(folded).or_insert(0) += r.value;
            }
            None => stackless += 1,
        }
    }
    (totals, stackless)
}

/// The fixture rows in batches of `per_batch`, with `stack` plain, as schema version 1 left it.
fn plain_batches(rows: &[Row], per_batch: usize) -> Vec<RecordBatch> {
    let mut md = fixture::metadata();
    md.insert(meta::SCHEMA_VERSION.into(), "1".into());
    let schema = Arc::new(stacks_stream::symbolized_schema(md));
    rows.chunks(per_batch)
        .map(|c| stacks_testkit::rows::batch(&schema, c))
        .collect()
}

/// The same batches with `stack` dictionary-encoded (schema version 2): each batch adds the
/// stacks it uses first to one growing dictionary, which the output stream sends as deltas.
fn dictionary_batches(plain: &[RecordBatch]) -> Vec<RecordBatch> {
    let schema = plain[0].schema();
    let idx = schema.index_of(col::STACK).unwrap();
    let value_type = schema.field(idx).data_type().clone();
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[idx] = Field::new(col::STACK, dict::dictionary_type(value_type.clone()), true);
    let mut md = schema.metadata().clone();
    md.insert(
        meta::SCHEMA_VERSION.into(),
        stacks_stream::SCHEMA_VERSION.into(),
    );
    let enc = Arc::new(Schema::new_with_metadata(fields, md));
    let mut d = dict::StackDictionary::new(&value_type);
    let mut keys: HashMap<Vec<u8>, i32> = HashMap::new();
    plain
        .iter()
        .map(|b| {
            let list = b.column(idx).as_list::<i32>();
            let ids = stacks_stream::stack_key::stack_keys(list, b.num_rows()).unwrap();
            let mut fresh = Vec::new();
            let row_keys: Int32Array = (0..b.num_rows())
                .map(|r| {
                    ids.is_valid(r).then(|| {
                        let next = (d.len() + fresh.len()) as i32;
                        *keys.entry(ids.value(r).to_vec()).or_insert_with(|| {
                            fresh.push(r as u32);
                            next
                        })
                    })
                })
                .collect();
            let taken = arrow_select::take::take(list, &UInt32Array::from(fresh), None).unwrap();
            d.extend(taken.as_ref()).unwrap();
            let mut columns = b.columns().to_vec();
            columns[idx] = d.column(row_keys).unwrap();
            RecordBatch::try_new(enc.clone(), columns).unwrap()
        })
        .collect()
}

/// Write `batches` as a stacks stream (delta dictionaries) to `path`.
fn write_stream(path: &Path, batches: &[RecordBatch]) {
    let mut out = stacks_stream::open_output(Some(path), &batches[0].schema()).unwrap();
    for b in batches {
        out.write(b).unwrap();
    }
    out.finish().unwrap();
}

fn pack(args: &[&str]) -> std::process::Output {
    let out = run_tool(
        stacks_tests::bin("stacks-pack"),
        args,
        &[],
        std::time::Duration::from_secs(300),
    );
    check(&out, &format!("stacks-pack {args:?}"));
    out
}

#[test]
fn pairs_hold_exactly_their_stacks_and_plain_sql_gets_the_input_totals() {
    let dir = scratch("pack-pairs");
    let rows = fixture::rows(400); // 3000-odd rows, 400 of them profile samples
    let (want, stackless) = expected(&rows);
    let plain = plain_batches(&rows, 300);
    let encoded = dictionary_batches(&plain);
    assert!(encoded.iter().all(|b| {
        let c = b.column_by_name(col::STACK).unwrap();
        matches!(c.data_type(), arrow_schema::DataType::Dictionary(..))
    }));
    let (p_in, d_in) = (dir.join("plain.arrows"), dir.join("dict.arrows"));
    write_stream(&p_in, &plain);
    write_stream(&d_in, &encoded);

    let mut stores = Vec::new();
    for (name, input) in [("plain", &p_in), ("dict", &d_in)] {
        let out = dir.join(name);
        let res = pack(&[
            out.to_str().unwrap(),
            "-i",
            input.to_str().unwrap(),
            "--max-rows",
            "700",
            "--row-group-rows",
            "250",
        ]);
        let err = String::from_utf8_lossy(&res.stderr).into_owned();
        let files = rows.len().div_ceil(700);
        let want_line = format!("{} rows in {files} file sets (", rows.len());
        assert!(err.contains(&want_line), "{name}: {err}");
        let got = pairs_of(&out);
        let pairs = got["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), files, "{name}: {got}");
        let mut stacks_rows = 0;
        for p in pairs {
            for flag in [
                "has_stacks",
                "exact",
                "unique",
                "sorted",
                "frames_exact",
                "frames_numbered",
                "one_set",
            ] {
                assert_eq!(p[flag], true, "{name}: {flag}: {p}");
            }
            assert!(p["stacks"].as_u64().unwrap() > 0, "{p}");
            let columns: Vec<&str> = p["columns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            assert!(!columns.contains(&col::STACK) && !columns.contains(&col::KSTACK));
            assert_eq!(columns.last(), Some(&col::STACK_ID));
            stacks_rows += p["stacks"].as_u64().unwrap();
        }
        assert!(
            err.contains(&format!("{} distinct stacks", want.len())),
            "{name}: {err}"
        );
        assert!(stacks_rows >= want.len() as u64);
        assert_eq!(got["rows"], rows.len());
        assert_eq!(got["stackless"], stackless, "{name}");
        let totals: BTreeMap<String, i64> = serde_json::from_value(got["totals"].clone()).unwrap();
        assert_eq!(totals, want, "{name}: DuckDB's joined totals");
        stores.push(got["pairs"].clone());
    }
    // Plain and dictionary input: the same pairs (rows, stacks, columns), names aside.
    let strip = |v: &Value| -> Vec<Value> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let mut p = p.clone();
                p.as_object_mut().unwrap().remove("name");
                p
            })
            .collect()
    };
    assert_eq!(strip(&stores[0]), strip(&stores[1]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The samples, stacks and frames tables of two file sets are equal (stream metadata and the
/// sets' numbers, hashes of their names, aside).
const SAME: &str = r#"
import json, sys
import pyarrow.parquet as pq
out = []
for base in sys.argv[1:]:
    s = pq.read_table(base + '.samples.parquet').replace_schema_metadata(None)
    k = pq.read_table(base + '.stacks.parquet').replace_schema_metadata(None).drop(['set_id'])
    f = pq.read_table(base + '.frames.parquet').replace_schema_metadata(None).drop(['set_id'])
    out.append((s, k, f))
(s0, k0, f0), (s1, k1, f1) = out
print(json.dumps(dict(same=s0.equals(s1) and k0.equals(k1) and f0.equals(f1),
                      samples=s0.equals(s1), rows=s0.num_rows, stacks=k0.num_rows,
                      frames=f0.num_rows)))
"#;

#[test]
fn dictionary_and_plain_input_give_identical_pairs() {
    let dir = scratch("pack-same");
    let rows = fixture::rows(150);
    let plain = plain_batches(&rows, 128);
    let encoded = dictionary_batches(&plain);
    let (p_in, d_in) = (dir.join("plain.arrows"), dir.join("dict.arrows"));
    write_stream(&p_in, &plain);
    write_stream(&d_in, &encoded);
    for (input, out) in [(&p_in, "p.parquet"), (&d_in, "d.parquet")] {
        pack(&[
            "-o",
            dir.join(out).to_str().unwrap(),
            "-i",
            input.to_str().unwrap(),
        ]);
    }
    let res = python(
        SAME,
        &[
            dir.join("p").to_str().unwrap(),
            dir.join("d").to_str().unwrap(),
        ],
    );
    check(&res, "pyarrow comparing the pairs");
    let got: Value = serde_json::from_slice(&res.stdout).unwrap();
    assert_eq!(got["rows"], rows.len());
    assert!(got["stacks"].as_u64().unwrap() > 1, "{got}");
    assert_eq!(got["same"], true, "{got}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Wide rows are cut into row groups by their memory, not only by `--row-group-rows`: the
/// rows of a group wait in memory to be sorted, so 120 MiB of 40 KiB paths make several
/// groups of at most 12 MiB of rows each, every row kept and each group sorted by time.
#[test]
fn wide_rows_make_row_groups_by_their_memory() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let dir = scratch("pack-wide");
    let mut rows = fixture::rows(400);
    for (i, r) in rows.iter_mut().enumerate() {
        r.path = Some(format!("{i:08}/{}", "p".repeat(40 << 10)));
    }
    let wide: usize = rows.iter().map(|r| r.path.as_ref().unwrap().len()).sum();
    assert!(wide > 100 << 20, "{wide} bytes of paths");
    let input = dir.join("wide.arrows");
    write_stream(&input, &plain_batches(&rows, 300));
    let out = dir.join("wide.parquet");
    pack(&["-i", input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let samples = dir.join("wide.samples.parquet");
    let reader = SerializedFileReader::new(std::fs::File::open(&samples).unwrap()).unwrap();
    let groups: Vec<i64> = reader
        .metadata()
        .row_groups()
        .iter()
        .map(|g| g.num_rows())
        .collect();
    assert_eq!(groups.iter().sum::<i64>(), rows.len() as i64, "{groups:?}");
    // By rows alone it would be one group. A group is cut once the rows waiting hold 12 MiB,
    // about 300 rows of 40 KiB; batches of 300 arrive whole, so a group holds fewer than
    // 12 MiB and one batch.
    let most = (12usize << 20) / (40 << 10) + 300;
    assert!(
        groups.len() >= wide / ((12 << 20) + 300 * (40 << 10))
            && groups.len() > 1
            && groups.iter().all(|&n| n as usize <= most),
        "row groups of {groups:?} rows"
    );
    // pyarrow: each row group is sorted by time, and every row's path is there.
    let check_groups = r#"
import sys, pyarrow.parquet as pq
f = pq.ParquetFile(sys.argv[1])
paths = set()
for i in range(f.num_row_groups):
    g = f.read_row_group(i, columns=['time', 'path'])
    t = g.column('time').cast('int64').to_pylist()
    assert t == sorted(t), f'row group {i} is not sorted by time'
    paths.update(p[:8] for p in g.column('path').to_pylist())
print(len(paths))
"#;
    let out = python(check_groups, &[samples.to_str().unwrap()]);
    check(&out, "pyarrow reading the row groups");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        rows.len().to_string()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
