//! The object stores a query reads, made on first use from the URL of the path being read and
//! the environment (stacks_store::objstore): stacks-query, the cluster's scheduler and its
//! executors all resolve `s3://BUCKET/…`, `gs://…`, `az://…` and `file:///…` this way, so an
//! executor needs no store registered for it in advance.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::object_store::ObjectStore;
use url::Url;

/// Stores by `scheme://bucket`, opened from the environment on first use.
#[derive(Default)]
pub(crate) struct EnvStores {
    stores: RwLock<HashMap<String, Arc<dyn ObjectStore>>>,
}

impl std::fmt::Debug for EnvStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<String> = self
            .stores
            .read()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default();
        f.debug_struct("EnvStores").field("open", &keys).finish()
    }
}

/// `scheme://bucket[:port]` of `url`: one store each.
fn key(url: &Url) -> String {
    format!(
        "{}://{}",
        url.scheme(),
        &url[url::Position::BeforeHost..url::Position::AfterPort]
    )
}

impl ObjectStoreRegistry for EnvStores {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.stores
            .write()
            .expect("not poisoned")
            .insert(key(url), store)
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        let k = key(url);
        if let Some(store) = self.stores.read().expect("not poisoned").get(&k) {
            return Ok(Arc::clone(store));
        }
        let store = stacks_store::objstore::open_root(url)
            .map_err(|e| DataFusionError::Configuration(e.to_string()))?;
        let mut stores = self.stores.write().expect("not poisoned");
        Ok(Arc::clone(stores.entry(k).or_insert(store)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_are_opened_once_per_bucket() {
        let stores = EnvStores::default();
        let a = stores
            .get_store(&Url::parse("s3://bucket-a/x/y.parquet").unwrap())
            .unwrap();
        let again = stores
            .get_store(&Url::parse("s3://bucket-a/z/").unwrap())
            .unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        let other = stores
            .get_store(&Url::parse("s3://bucket-b/").unwrap())
            .unwrap();
        assert!(!Arc::ptr_eq(&a, &other));
        let e = stores
            .get_store(&Url::parse("ftp://h/x").unwrap())
            .err()
            .unwrap();
        assert!(e.to_string().contains("unknown scheme `ftp`"), "{e}");
    }
}
