//! Object stores named by URL (`s3://BUCKET/PREFIX`, `gs://…`, `az://…`, `file:///…`),
//! configured from the usual environment variables: the one place stacks-pack (writing),
//! stacks-query and the cluster's scheduler and executors (reading) open them.

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as Key;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};
use url::Url;

/// URL schemes of the stores stacks reads and writes.
pub(crate) const SCHEMES: [&str; 7] = ["s3", "s3a", "gs", "az", "abfs", "azure", "file"];

/// Why a store URL cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("`{url}`: {detail}")]
pub struct StoreUrlError {
    pub url: String,
    pub detail: String,
}

/// Whether `arg` is a URL (`scheme://…`) rather than a path: an object store, or a scheme
/// [`open`] refuses by name.
pub fn is_url(arg: &str) -> bool {
    arg.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric())
    })
}

/// The store `url` names (its bucket or container, or for `file://` the directory the URL's
/// path names) and the key prefix under it. Credentials, region and endpoint come from the
/// environment: `AWS_*` (`AWS_ENDPOINT` with `AWS_ALLOW_HTTP=true` for an S3-compatible server
/// on plain HTTP), `GOOGLE_*`, `AZURE_*`. A `file://` directory must exist.
pub fn open(url: &str) -> Result<(Arc<dyn ObjectStore>, Key), StoreUrlError> {
    let bad = |detail: String| StoreUrlError {
        url: url.to_string(),
        detail,
    };
    let parsed = Url::parse(url).map_err(|e| bad(e.to_string()))?;
    let store = open_bucket(&parsed).map_err(|e| bad(e.to_string()))?;
    let prefix = match parsed.scheme() {
        "file" => Key::default(),
        _ => Key::from_url_path(parsed.path()).map_err(|e| bad(e.to_string()))?,
    };
    Ok((store, prefix))
}

/// The store holding `url`'s bucket (for `file://`, the directory its path names), as
/// [`open`]; errors are the store library's.
fn open_bucket(url: &Url) -> Result<Arc<dyn ObjectStore>, String> {
    install_crypto();
    // Each request is retried by the client for at most a minute. (Client options, timeouts
    // among them, come from the environment: setting them here would replace those,
    // AWS_ALLOW_HTTP included.)
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 3,
        retry_timeout: Duration::from_secs(60),
    };
    let text = url.as_str();
    Ok(match url.scheme() {
        "s3" | "s3a" => Arc::new(
            object_store::aws::AmazonS3Builder::from_env()
                .with_url(text)
                .with_retry(retry)
                .build()
                .map_err(|e| e.to_string())?,
        ),
        "gs" => Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(text)
                .with_retry(retry)
                .build()
                .map_err(|e| e.to_string())?,
        ),
        "az" | "abfs" | "azure" => Arc::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(text)
                .with_retry(retry)
                .build()
                .map_err(|e| e.to_string())?,
        ),
        "file" => {
            let root = url
                .to_file_path()
                .map_err(|()| "not a local path".to_string())?;
            Arc::new(
                object_store::local::LocalFileSystem::new_with_prefix(&root)
                    .map_err(|e| e.to_string())?,
            )
        }
        other => return Err(format!("unknown scheme `{other}`: use one of {SCHEMES:?}")),
    })
}

/// The store of `url`'s scheme and bucket, with keys from the bucket's root (a `file://` URL
/// gives the whole local file system): what a query engine's store registry hands out for
/// every path under that bucket.
pub fn open_root(url: &Url) -> Result<Arc<dyn ObjectStore>, StoreUrlError> {
    let bad = |detail: String| StoreUrlError {
        url: url.to_string(),
        detail,
    };
    if url.scheme() == "file" {
        install_crypto();
        return Ok(Arc::new(object_store::local::LocalFileSystem::new()));
    }
    let mut root = url.clone();
    root.set_path("/");
    root.set_query(None);
    root.set_fragment(None);
    open_bucket(&root).map_err(bad)
}

/// HTTPS to the stores goes through rustls, which needs a crypto provider chosen once per
/// process (an error only means one is installed already).
fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths() {
        assert!(is_url("s3://b/p") && is_url("file:///tmp/x") && is_url("ftp://h/x"));
        assert!(!is_url("out") && !is_url("/tmp/a://b") && !is_url("://x"));
    }

    #[test]
    fn bad_urls_are_named() {
        let Err(e) = open("ftp://host/x") else {
            panic!("ftp:// opened")
        };
        let e = e.to_string();
        assert!(e.starts_with("`ftp://host/x`: unknown scheme `ftp`"), "{e}");
        let (_, prefix) = open("s3://bucket/fleet/prod/").expect("opens without credentials");
        assert_eq!(prefix.as_ref(), "fleet/prod");
    }
}
