//! Benchmark input for stacks-pack: a symbolized stacks stream on stdout with ROWS rows drawn
//! from DISTINCT stacks of 20–60 frames (skewed: a few stacks are most of the samples, as in a
//! profile), `stack` plain (`plain`) or dictionary-encoded with delta dictionaries (`dict`).
//!
//! `cargo run --release -p stacks-pack --example gen_stream -- ROWS DISTINCT plain|dict > x.arrows`
//!
//! Measured (2 shared cores, `gen_stream 2000000 12000 MODE | /usr/bin/time -v stacks-pack
//! DIR`, release): before the pair layout, plain input took 49.7 CPU s (40k rows/CPU s), peaked
//! at 1.78 GiB and wrote 544 MB; dictionary input was refused (the Parquet writer has no
//! dictionary-of-list). With the pairs: plain 22.2 CPU s (90k rows/CPU s, most of it decoding
//! the 12 GB of plain stacks), 287 MiB, 31 MB; dictionary 2.05 CPU s (976k rows/CPU s),
//! 368 MiB, the same 31 MB. Peak memory follows the distinct stacks, not the rows (dictionary
//! input: 0.5M/2M/4M rows → 358/368/392 MiB; 24k distinct stacks → 638 MiB).

use std::sync::Arc;

use anyhow::{Context, bail};
use arrow_array::{ArrayRef, Int32Array, Int64Array, StringArray, TimestampNanosecondArray};
use arrow_array::{RecordBatch, UInt32Array};
use stacks_stream::{col, dict};
use stacks_testkit::recording;
use stacks_testkit::rows::{Frame, stack_array};

const BATCH: usize = 8192;

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn frame(rng: &mut Rng, f: u64) -> Frame {
    Frame {
        function: Some(format!("app::module_{}::function_{f}", f % 97)),
        file: Some(format!("src/module_{}.rs", f % 97)),
        line: Some(10 + (rng.below(400)) as u32),
        inlined: rng.below(8) == 0,
        module: Some("/usr/bin/app".into()),
        build_id: Some("0123456789abcdef0123456789abcdef01234567".into()),
        offset: Some(0x1000 + f * 0x40),
        addr: 0x5555_0000_0000 + f * 0x40,
        ..Default::default()
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [rows, distinct, mode] = args.as_slice() else {
        bail!("usage: gen_stream ROWS DISTINCT plain|dict");
    };
    let rows: usize = rows.parse().context("ROWS")?;
    let distinct: usize = distinct.parse().context("DISTINCT")?;
    let dictionary = match mode.as_str() {
        "plain" => false,
        "dict" => true,
        other => bail!("mode `{other}`: plain or dict"),
    };
    let mut rng = Rng(42);
    // Stacks share their roots (main, a few dispatchers) and end in varied leaves.
    let stacks: Vec<Vec<Frame>> = (0..distinct)
        .map(|_| {
            let depth = 20 + rng.below(41) as usize;
            let mut s: Vec<Frame> = (0..depth)
                .map(|level| {
                    let f = if level + 3 >= depth {
                        level as u64
                    } else {
                        1000 + rng.below(5000)
                    };
                    frame(&mut rng, f)
                })
                .collect();
            s.reverse(); // leaf first, as the contract stores stacks
            s
        })
        .collect();
    let refs: Vec<Option<&[Frame]>> = stacks.iter().map(|s| Some(s.as_slice())).collect();
    let values = stack_array(&refs);

    let plain_schema = stacks_stream::symbolized_schema(recording::metadata());
    let schema = Arc::new(if dictionary {
        dict::encoded_schema(&plain_schema)
    } else {
        plain_schema
    });
    let mut out = stacks_stream::open_output(None, &schema)?;
    let mut d = dict::StackDictionary::new(values.data_type());
    let mut key_of: Vec<Option<i32>> = vec![None; distinct];
    let mut time = recording::T0;
    let mut done = 0;
    while done < rows {
        let n = BATCH.min(rows - done);
        // Skewed choice: the square of a uniform number favours low indices.
        let picks: Vec<usize> = (0..n)
            .map(|_| {
                let u = rng.below(1 << 20) as f64 / (1u64 << 20) as f64;
                ((u * u) * distinct as f64) as usize % distinct.max(1)
            })
            .collect();
        let stack: ArrayRef = if dictionary {
            let mut fresh: Vec<u32> = Vec::new();
            for &p in &picks {
                if key_of[p].is_none() {
                    key_of[p] = Some((d.len() + fresh.len()) as i32);
                    fresh.push(p as u32);
                }
            }
            let taken = arrow_select::take::take(values.as_ref(), &UInt32Array::from(fresh), None)?;
            d.extend(taken.as_ref())?;
            d.column(Int32Array::from_iter(picks.iter().map(|&p| key_of[p])))?
        } else {
            let idx = UInt32Array::from_iter_values(picks.iter().map(|&p| p as u32));
            arrow_select::take::take(values.as_ref(), &idx, None)?
        };
        let times: Vec<i64> = (0..n)
            .map(|_| {
                time += 1_000_000 + rng.below(50_000) as i64;
                time - rng.below(3) as i64 * 200_000 // slightly out of order
            })
            .collect();
        let tids: Vec<i32> = (0..n).map(|_| 1000 + rng.below(64) as i32).collect();
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                col::TIME,
                Arc::new(TimestampNanosecondArray::from(times).with_timezone("UTC")),
            ),
            (col::KIND, Arc::new(StringArray::from(vec!["profile"; n]))),
            (col::PID, Arc::new(Int32Array::from(vec![1000; n]))),
            (col::TID, Arc::new(Int32Array::from(tids.clone()))),
            (col::COMM, Arc::new(StringArray::from(vec!["app"; n]))),
            (
                col::THREAD,
                Arc::new(StringArray::from_iter_values(
                    tids.iter().map(|t| format!("worker-{t}")),
                )),
            ),
            (
                col::CPU,
                Arc::new(Int32Array::from_iter_values(tids.iter().map(|t| t % 8))),
            ),
            (col::VALUE, Arc::new(Int64Array::from(vec![10_101_010; n]))),
            (col::STACK, stack),
        ];
        let batch: RecordBatch = stacks_stream::batch_by_name(Arc::clone(&schema), n, columns)?;
        out.write(&batch)?;
        done += n;
    }
    out.finish()?;
    Ok(())
}
