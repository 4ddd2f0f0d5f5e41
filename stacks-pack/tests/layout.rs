//! How `stacks-pack` lays rows out: row groups sorted by time with matching statistics,
//! file names stamped with the first row's time, rotation by bytes and by age, and hive-style
//! date partitions.

mod common;

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, TimestampNanosecondType};
use arrow_array::{RecordBatch, UInt32Array};
use common::*;
use parquet::file::statistics::Statistics;

/// `b` with its rows in the order given by `order`.
fn reorder(b: &RecordBatch, order: &[u32]) -> RecordBatch {
    let idx = UInt32Array::from(order.to_vec());
    let cols = b
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c.as_ref(), &idx, None).unwrap())
        .collect();
    RecordBatch::try_new(b.schema(), cols).unwrap()
}

fn times(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            b.column_by_name("time")
                .unwrap()
                .as_primitive::<TimestampNanosecondType>()
                .values()
                .to_vec()
        })
        .collect()
}

fn tids(batches: &[RecordBatch]) -> Vec<i32> {
    let mut v: Vec<i32> = batches
        .iter()
        .flat_map(|b| {
            b.column_by_name("tid")
                .unwrap()
                .as_primitive::<Int32Type>()
                .values()
                .to_vec()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn row_groups_are_sorted_by_time_with_tight_statistics() {
    let scratch = Scratch::new("sorted");
    let out = scratch.path().join("out");
    let schema = symbolized();
    // 40 rows arriving in a scrambled order (a stride permutation), in batches of 8.
    let ordered = batch(&schema, 0, 40);
    let order: Vec<u32> = (0..40u32).map(|i| (i * 17) % 40).collect();
    let scrambled = reorder(&ordered, &order);
    let input: Vec<RecordBatch> = (0..5).map(|k| scrambled.slice(k * 8, 8)).collect();
    let (bytes, _) = stream(&schema, &input, true);

    let res = run(&[out.to_str().unwrap(), "--row-group-rows", "10"], bytes);
    assert!(res.status.success(), "{}", stderr(&res));
    let names = parquet_files(&out);
    assert_eq!(names.len(), 1);
    let rb = read_parquet(&names[0]);
    assert_eq!(rb.rows(), 40);
    let md = rb.metadata.clone();
    assert_eq!(md.num_row_groups(), 4);
    let all = times(&rb.batches);
    for (g, rg) in md.row_groups().iter().enumerate() {
        let rows = &all[g * 10..(g + 1) * 10];
        assert!(rows.windows(2).all(|w| w[0] <= w[1]), "group {g} unsorted");
        // Each group holds exactly the rows that arrived in its slot, sorted.
        let mut want: Vec<i64> = times(&[scrambled.slice(g * 10, 10)]);
        want.sort();
        assert_eq!(rows, want.as_slice(), "group {g}");
        match rg.column(0).statistics() {
            Some(Statistics::Int64(s)) => {
                assert_eq!(s.min_opt(), Some(&rows[0]), "group {g} min");
                assert_eq!(s.max_opt(), Some(&rows[9]), "group {g} max");
            }
            other => panic!("time statistics: {other:?}"),
        }
        let sorting = rg.sorting_columns().expect("row group declares its order");
        assert_eq!(sorting[0].column_idx, 0);
        assert!(!sorting[0].descending);
    }
    assert_eq!(tids(&rb.batches), tids(&input), "every row kept once");

    // Named after its first (earliest) row: the fixture starts at 2023-11-14T22:13:20Z.
    let name = names[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("stacks-20231114T221320Z-"), "{name}");
}

#[test]
fn rotation_by_bytes_finishes_files_past_the_size() {
    let scratch = Scratch::new("bytes");
    let out = scratch.path().join("out");
    let schema = symbolized();
    let input = batches(&schema, &[50, 50, 50, 50]);
    let (bytes, _) = stream(&schema, &input, true);
    let res = run(
        &[
            out.to_str().unwrap(),
            "--row-group-rows",
            "20",
            "--max-bytes",
            "12K",
        ],
        bytes,
    );
    assert!(res.status.success(), "{}", stderr(&res));
    let names = parquet_files(&out);
    assert!(names.len() >= 2, "{names:?}");
    let mut got = Vec::new();
    for (i, p) in names.iter().enumerate() {
        let rb = read_parquet(p);
        let groups = rb.metadata.num_row_groups();
        let data: i64 = rb
            .metadata
            .row_groups()
            .iter()
            .map(|g| g.compressed_size())
            .sum();
        if i + 1 < names.len() {
            // Closed at the first row-group boundary at or past 12 KiB of data: one group
            // fewer stays under it.
            let last = rb.metadata.row_group(groups - 1).compressed_size();
            assert!(data - last < 12 * 1024, "{}: closed late", p.display());
        }
        got.extend(rb.batches);
    }
    assert_same_rows(&input, &got);
}

#[test]
fn rotation_by_age_finishes_a_file_while_input_is_idle() {
    let scratch = Scratch::new("age");
    let out = scratch.path().join("out");
    let schema = symbolized();
    let input = batches(&schema, &[5, 7]);
    let (bytes, ends) = stream(&schema, &input, true);

    let mut child = spawn(&[out.to_str().unwrap(), "--max-age", "300ms"]);
    let mut stdin = child.stdin.take().unwrap();
    let start = Instant::now();
    stdin.write_all(&bytes[..ends[0]]).unwrap();
    stdin.flush().unwrap();
    wait_for("the first file, finished by age", || {
        out.is_dir() && parquet_files(&out).len() == 1
    });
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(250),
        "too early: {waited:?}"
    );
    assert_eq!(read_parquet(&parquet_files(&out)[0]).rows(), 5);

    stdin.write_all(&bytes[ends[0]..]).unwrap();
    drop(stdin);
    let res = child.wait_with_output().unwrap();
    assert!(res.status.success(), "{}", stderr(&res));
    let names = parquet_files(&out);
    assert_eq!(names.len(), 2);
    let got: Vec<RecordBatch> = names.iter().flat_map(|p| read_parquet(p).batches).collect();
    assert_same_rows(&input, &got);
}

#[test]
fn date_partitions_hold_only_their_dates_rows() {
    let scratch = Scratch::new("partition");
    let out = scratch.path().join("out");
    let schema = symbolized();
    // Rows 1 s apart from 23:59:50 UTC: the first 10 on one date, the rest on the next.
    let base = batch(&schema, 0, 25);
    let day_end: i64 = 1_700_006_400 * 1_000_000_000; // 2023-11-15T00:00:00Z
    let time = arrow_array::TimestampNanosecondArray::from_iter_values(
        (0..25i64).map(|i| day_end - 10_000_000_000 + i * 1_000_000_000),
    )
    .with_timezone("UTC");
    let mut cols = base.columns().to_vec();
    cols[0] = Arc::new(time);
    let b = RecordBatch::try_new(schema.clone(), cols).unwrap();
    let (bytes, _) = stream(&schema, std::slice::from_ref(&b), true);

    let res = run(&[out.to_str().unwrap(), "--partition", "date"], bytes);
    assert!(res.status.success(), "{}", stderr(&res));
    let d1 = out.join("date=2023-11-14");
    let d2 = out.join("date=2023-11-15");
    assert!(parquet_files(&out).is_empty(), "files only in partitions");
    let (f1, f2) = (parquet_files(&d1), parquet_files(&d2));
    assert_eq!((f1.len(), f2.len()), (1, 1), "{f1:?} {f2:?}");
    let r1 = read_parquet(&f1[0]);
    let r2 = read_parquet(&f2[0]);
    assert_eq!((r1.rows(), r2.rows()), (10, 15));
    assert!(times(&r1.batches).iter().all(|&t| t < day_end));
    assert!(times(&r2.batches).iter().all(|&t| t >= day_end));
    let mut got = r1.batches;
    got.extend(r2.batches);
    assert_same_rows(&[b], &got);

    // Partitioning needs a time column, which every stacks stream has: anything else is refused.
    let plain = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
        "v",
        arrow_schema::DataType::Int64,
        false,
    )]));
    let (bytes, _) = stream(&plain, &[], true);
    let res = run(
        &[
            scratch.path().join("p2").to_str().unwrap(),
            "--partition",
            "date",
        ],
        bytes,
    );
    assert_eq!(res.status.code(), Some(1));
    assert!(
        stderr(&res).contains("not a stacks row stream"),
        "{}",
        stderr(&res)
    );
}
