//! `memory://NAME/...`: process-wide in-memory object stores, one per name.
//!
//! They make every object-store code path (export resolution, streaming reads, the commit with
//! `run.json` last, `etl sql` over committed files) testable in-process without a server; the
//! integration tests still run the same paths against a real S3 stand-in (moto).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use object_store::ObjectStore;
use object_store::memory::InMemory;

/// The in-memory store named `name`, created empty on first use.
pub fn store(name: &str) -> Arc<dyn ObjectStore> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<InMemory>>>> = OnceLock::new();
    let mut stores = STORES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    let s = stores.entry(name.to_owned()).or_insert_with(|| Arc::new(InMemory::new()));
    s.clone()
}

#[cfg(test)]
mod tests {
    use object_store::path::Path;
    use object_store::{ObjectStoreExt as _, PutPayload};

    #[test]
    fn one_store_per_name() {
        let rt = crate::store::io_runtime();
        rt.block_on(async {
            super::store("mem-a").put(&Path::from("k"), PutPayload::from("x")).await.unwrap();
            assert!(super::store("mem-a").head(&Path::from("k")).await.is_ok());
            assert!(super::store("mem-b").head(&Path::from("k")).await.is_err());
        });
    }
}
