//! Packing into object storage (`s3://`, `gs://`, `az://`, `file://`): file sets are written
//! to a local spool directory exactly as to any directory (hive partitions `date=/hour=`,
//! crash-safe), and an uploader thread puts each finished set under
//! `PREFIX/date=YYYY-MM-DD/hour=HH/host=NAME/`, its frames and stacks files before its samples,
//! then removes it from the spool. Sets left by an earlier packer (killed, or the store down
//! when it ended) are uploaded first; a set uploaded again after a crash lands on the same keys
//! with the same bytes. While the store cannot be reached, file sets wait in the spool (retried with backoff);
//! past `--spool-max` the oldest are dropped, counted and reported.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use parquet::file::reader::{FileReader, SerializedFileReader};
use stacks_store::objstore;
use url::Url;

use crate::TOOL;
use crate::stale::owner_of_base;

/// Files up to this size are put in one request; larger ones in parts.
const SINGLE_PUT: u64 = 32 << 20;
/// Longest wait between two attempts while the store fails.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How often the spool is looked at while there is nothing to upload.
const IDLE: Duration = Duration::from_millis(200);

/// Why a store could not be opened or a pair not uploaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UploadError {
    #[error("`{url}`: {detail}")]
    Url { url: String, detail: String },
    #[error("{0}")]
    Store(#[from] object_store::Error),
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
}

/// A destination in object storage: the store and the key prefix under it.
pub(crate) struct StoreDest {
    store: Arc<dyn ObjectStore>,
    prefix: Key,
    /// The URL as given, for messages.
    pub shown: String,
}

impl StoreDest {
    /// The store `url` names, configured from the usual environment variables (`AWS_*`,
    /// `GOOGLE_*`, `AZURE_*`: credentials, region, `AWS_ENDPOINT` and `AWS_ALLOW_HTTP` for an
    /// S3-compatible server).
    pub(crate) fn open(url: &str) -> Result<Self, UploadError> {
        // A local directory is made if missing, as a directory given to stacks-pack is.
        if let Ok(parsed) = Url::parse(url)
            && parsed.scheme() == "file"
            && let Ok(root) = parsed.to_file_path()
        {
            fs::create_dir_all(&root).map_err(|e| UploadError::Url {
                url: url.to_string(),
                detail: e.to_string(),
            })?;
        }
        let (store, prefix) = objstore::open(url).map_err(|e| UploadError::Url {
            url: e.url,
            detail: e.detail,
        })?;
        Ok(Self {
            store,
            prefix,
            shown: url.to_string(),
        })
    }

    /// The key of a spooled file: the prefix, its partition directories, `host=NAME`, its name.
    fn key(&self, spool: &Path, file: &Path) -> Option<Key> {
        let rel = file.strip_prefix(spool).ok()?;
        let name = rel.file_name()?.to_str()?;
        let base = name
            .strip_suffix(stacks_store::SAMPLES_SUFFIX)
            .or_else(|| name.strip_suffix(stacks_store::STACKS_SUFFIX))
            .or_else(|| name.strip_suffix(stacks_store::FRAMES_SUFFIX))?;
        let (host, _) = owner_of_base(base)?;
        let mut parts: Vec<String> = self
            .prefix
            .parts()
            .map(|p| p.as_ref().to_string())
            .collect();
        for dir in rel.parent()?.components() {
            parts.push(dir.as_os_str().to_str()?.to_string());
        }
        parts.push(format!("host={host}"));
        parts.push(name.to_string());
        Some(Key::from_iter(parts))
    }
}

/// What the uploader did.
#[derive(Debug, Default, Clone)]
pub struct UploadSummary {
    pub pairs: u64,
    pub rows: u64,
    pub bytes: u64,
    /// Failed attempts (each retried).
    pub failures: u64,
    /// Pairs dropped from the spool while it was over its bound, and their rows.
    pub dropped_pairs: u64,
    pub dropped_rows: u64,
    /// Pairs still in the spool when the uploader stopped, and their rows.
    pub left_pairs: u64,
    pub left_rows: u64,
}

/// How the uploader runs.
pub(crate) struct UploadOptions {
    /// Pairs (complete ones) may take this many bytes in the spool.
    pub spool_max: u64,
    /// After the input ended, keep trying this long before leaving pairs in the spool.
    pub wait: Duration,
}

/// The uploader thread.
pub(crate) struct Uploader {
    done: Arc<AtomicBool>,
    thread: JoinHandle<UploadSummary>,
}

impl Uploader {
    /// Start uploading the complete pairs of `spool` (and every later one) to `dest`.
    pub(crate) fn start(
        dest: StoreDest,
        spool: PathBuf,
        opts: UploadOptions,
    ) -> std::io::Result<Self> {
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let thread = std::thread::Builder::new()
            .name("upload".into())
            .spawn(move || run(&dest, &spool, &opts, &flag))?;
        Ok(Self { done, thread })
    }

    /// The input ended and every pair is in the spool: upload what is left (for at most the
    /// options' `wait` if the store fails) and stop.
    pub(crate) fn finish(self) -> UploadSummary {
        self.done.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

/// The spool's complete pairs (samples files whose stacks file is there too), oldest first
/// (names start with the UTC time of their first row).
fn complete_pairs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') {
            continue;
        }
        match entry.file_type() {
            Ok(t) if t.is_dir() && name.contains('=') => complete_pairs(&path, out),
            Ok(t)
                if t.is_file()
                    && stacks_store::file_kind(&path) == Some(stacks_store::FileKind::Samples)
                    && stacks_store::stacks_path(&path).exists() =>
            {
                out.push(path)
            }
            _ => {}
        }
    }
}

fn sorted_pairs(spool: &Path) -> Vec<PathBuf> {
    let mut pairs = Vec::new();
    complete_pairs(spool, &mut pairs);
    pairs.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    pairs
}

/// Rows of a samples file (its footer).
fn rows_of(samples: &Path) -> u64 {
    File::open(samples)
        .ok()
        .and_then(|f| SerializedFileReader::new(f).ok())
        .map_or(0, |r| r.metadata().file_metadata().num_rows().max(0) as u64)
}

fn pair_bytes(samples: &Path) -> u64 {
    let size = |p: &Path| fs::metadata(p).map_or(0, |m| m.len());
    size(samples)
        + size(&stacks_store::stacks_path(samples))
        + size(&stacks_store::frames_path(samples))
}

/// Remove a pair from the spool: samples first, so a pair is never half there as "complete".
/// (Its partition directories stay: the packer may be about to write there. A later packer
/// removes them once empty, see [`prune_empty`].)
fn remove_pair(samples: &Path) {
    let _ = fs::remove_file(samples);
    let _ = fs::remove_file(stacks_store::stacks_path(samples));
    let _ = fs::remove_file(stacks_store::frames_path(samples));
}

/// Remove the empty partition directories (`key=value`) under `dir`, before packing starts.
pub(crate) fn prune_empty(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if entry.file_type().is_ok_and(|t| t.is_dir()) && name.to_string_lossy().contains('=') {
            let sub = entry.path();
            prune_empty(&sub);
            let _ = fs::remove_dir(&sub); // fails unless empty
        }
    }
}

/// Put one file at `key`: in one request, or in parts when large.
async fn put_file(dest: &StoreDest, path: &Path, key: &Key) -> Result<(), UploadError> {
    let io = |err| UploadError::Io {
        path: path.display().to_string(),
        err,
    };
    let len = fs::metadata(path).map_err(io)?.len();
    if len <= SINGLE_PUT {
        let bytes = fs::read(path).map_err(io)?;
        dest.store.put(key, PutPayload::from(bytes)).await?;
        return Ok(());
    }
    let mut part = WriteMultipart::new(dest.store.put_multipart(key).await?);
    let mut file = File::open(path).map_err(io)?;
    let mut buf = vec![0u8; 8 << 20];
    loop {
        let n = std::io::Read::read(&mut file, &mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        part.wait_for_capacity(4).await?;
        part.write(&buf[..n]);
    }
    part.finish().await?;
    Ok(())
}

/// Upload one file set: its frames file (when it has one), then its stacks file, then its
/// samples file (readers ignore stacks and frames files without samples).
async fn upload_pair(dest: &StoreDest, spool: &Path, samples: &Path) -> Result<(), UploadError> {
    let unnamed = |p: &Path| UploadError::Url {
        url: dest.shown.clone(),
        detail: format!("{} is not a stacks-pack file of the spool", p.display()),
    };
    let frames = stacks_store::frames_path(samples);
    let mut files = Vec::with_capacity(3);
    if frames.exists() {
        files.push(frames);
    }
    files.push(stacks_store::stacks_path(samples));
    files.push(samples.to_path_buf());
    for file in &files {
        let key = dest.key(spool, file).ok_or_else(|| unnamed(file))?;
        put_file(dest, file, &key).await?;
    }
    Ok(())
}

/// Drop the oldest pairs while the spool holds more than `max` bytes of complete pairs.
fn bound_spool(pairs: &mut Vec<PathBuf>, max: u64, summary: &mut UploadSummary, spool: &Path) {
    let mut total: u64 = pairs.iter().map(|p| pair_bytes(p)).sum();
    while total > max && pairs.len() > 1 {
        let oldest = pairs.remove(0);
        total -= pair_bytes(&oldest);
        let rows = rows_of(&oldest);
        summary.dropped_pairs += 1;
        summary.dropped_rows += rows;
        eprintln!(
            "{TOOL}: warning: spool {} over its bound ({max} bytes) while the store fails: \
             dropped {} ({rows} rows)",
            spool.display(),
            oldest.display()
        );
        remove_pair(&oldest);
    }
}

/// The uploader's loop (its own thread, a single-threaded async runtime).
fn run(dest: &StoreDest, spool: &Path, opts: &UploadOptions, done: &AtomicBool) -> UploadSummary {
    let mut summary = UploadSummary::default();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{TOOL}: error: starting the uploader: {e}");
            return summary;
        }
    };
    let mut backoff = Duration::ZERO;
    let mut failing = false;
    let mut deadline: Option<Instant> = None;
    loop {
        let finishing = done.load(Ordering::SeqCst);
        if finishing && deadline.is_none() {
            deadline = Some(Instant::now() + opts.wait);
        }
        let mut pairs = sorted_pairs(spool);
        bound_spool(&mut pairs, opts.spool_max, &mut summary, spool);
        let Some(next) = pairs.first() else {
            if finishing {
                break;
            }
            std::thread::sleep(IDLE);
            continue;
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            summary.left_pairs = pairs.len() as u64;
            summary.left_rows = pairs.iter().map(|p| rows_of(p)).sum();
            break;
        }
        let bytes = pair_bytes(next);
        match rt.block_on(upload_pair(dest, spool, next)) {
            Ok(()) => {
                summary.pairs += 1;
                summary.rows += rows_of(next);
                summary.bytes += bytes;
                remove_pair(next);
                if failing {
                    eprintln!("{TOOL}: {} reachable again: uploading", dest.shown);
                    failing = false;
                }
                backoff = Duration::ZERO;
            }
            Err(e) => {
                summary.failures += 1;
                if !failing {
                    eprintln!(
                        "{TOOL}: warning: uploading to {} failed ({e}): keeping the files in \
                         the spool {} and retrying",
                        dest.shown,
                        spool.display()
                    );
                    failing = true;
                }
                backoff = (backoff * 2).clamp(Duration::from_millis(500), MAX_BACKOFF);
                let until = Instant::now() + backoff;
                while Instant::now() < until && deadline.is_none_or(|d| Instant::now() < d) {
                    std::thread::sleep(IDLE);
                    if done.load(Ordering::SeqCst) && deadline.is_none() {
                        deadline = Some(Instant::now() + opts.wait);
                    }
                }
            }
        }
    }
    summary
}

/// The summary line of an upload.
pub fn describe(s: &UploadSummary, dest: &str, spool: &Path) -> String {
    let mut line = format!(
        "{TOOL}: uploaded {} file sets ({} rows, {} bytes) to {dest}",
        s.pairs, s.rows, s.bytes
    );
    if s.failures > 0 {
        line.push_str(&format!("; {} failed attempts, retried", s.failures));
    }
    if s.dropped_pairs > 0 {
        line.push_str(&format!(
            "; dropped {} file sets ({} rows): the spool was full",
            s.dropped_pairs, s.dropped_rows
        ));
    }
    if s.left_pairs > 0 {
        line.push_str(&format!(
            "; {} file sets ({} rows) left in the spool {}: the next stacks-pack with this spool \
             uploads them",
            s.left_pairs,
            s.left_rows,
            spool.display()
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_url_is_named() {
        let err = StoreDest::open("ftp://x").err().unwrap().to_string();
        assert!(err.contains("unknown scheme `ftp`"), "{err}");
    }

    #[test]
    fn a_full_spool_drops_its_oldest_pairs() {
        let spool = std::env::temp_dir().join(format!("stacks-spool-test-{}", std::process::id()));
        let hour = spool.join("date=2026-11-23/hour=07");
        fs::create_dir_all(&hour).unwrap();
        for seq in 1..=3 {
            let base = format!("stacks-20261123T07000{seq}Z-h-1-00000{seq}");
            fs::write(hour.join(format!("{base}.samples.parquet")), [0u8; 100]).unwrap();
            fs::write(hour.join(format!("{base}.stacks.parquet")), [0u8; 100]).unwrap();
        }
        // An unfinished pair (no samples file yet) is not the uploader's.
        fs::write(
            hour.join("stacks-20261123T070009Z-h-1-000009.stacks.parquet"),
            [0u8; 9],
        )
        .unwrap();
        let mut pairs = sorted_pairs(&spool);
        assert_eq!(pairs.len(), 3);
        let mut summary = UploadSummary::default();
        bound_spool(&mut pairs, 450, &mut summary, &spool);
        assert_eq!((summary.dropped_pairs, pairs.len()), (1, 2));
        assert!(
            pairs[0].to_string_lossy().contains("000002"),
            "the oldest went first"
        );
        assert_eq!(sorted_pairs(&spool), pairs);
        fs::remove_dir_all(&spool).unwrap();
    }

    #[test]
    fn keys_put_the_host_below_the_hour() {
        let dest = StoreDest::open("s3://bucket/fleet/prod").unwrap();
        let spool = Path::new("/var/tmp/spool");
        let file = spool.join(
            "date=2026-11-23/hour=07/stacks-20261123T071500Z-web-17-4242-000003.samples.parquet",
        );
        assert_eq!(
            dest.key(spool, &file).unwrap().as_ref(),
            "fleet/prod/date=2026-11-23/hour=07/host=web-17/\
             stacks-20261123T071500Z-web-17-4242-000003.samples.parquet"
        );
        assert!(dest.key(spool, &spool.join("other.parquet")).is_none());
    }
}
