//! Sharing one informer (one Reflector, one cache) among every subscriber of
//! the same resource, namespace and selectors, like client-go's
//! `SharedInformerFactory`.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kinformer_actors::Object;
use kube::Api;

use crate::informer::{Informer, InformerBuilder, InformerError};

/// Identifies a shared informer: object type, resource path (with namespace) and selectors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct InformerKey {
    type_id: TypeId,
    resource_url: String,
    label_selector: Option<String>,
    field_selector: Option<String>,
}

/// Hands out one shared [`Informer`] per resource, namespace and selectors.
///
/// The first request for a key builds and starts the informer (with the
/// builder options of that first request); later requests get the same
/// informer, so subscribers share its Reflector, watch connection and cache.
/// A stopped informer is replaced by a new one.
#[derive(Clone, Default)]
pub struct InformerFactory {
    informers: Arc<Mutex<HashMap<InformerKey, Box<dyn Any + Send + Sync>>>>,
}

impl InformerFactory {
    /// An empty factory.
    pub fn new() -> Self {
        Self::default()
    }

    /// The shared informer for `api` with these selectors; `configure` runs
    /// only when the informer is created (selectors it sets are replaced by
    /// these). Must run inside an actix System or a tokio `LocalSet`.
    pub fn informer<K: Object>(
        &self,
        api: Api<K>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
        configure: impl FnOnce(InformerBuilder<K>) -> InformerBuilder<K>,
    ) -> Result<Informer<K>, InformerError> {
        let key = InformerKey {
            type_id: TypeId::of::<K>(),
            resource_url: api.resource_url().to_owned(),
            label_selector: label_selector.map(str::to_owned),
            field_selector: field_selector.map(str::to_owned),
        };
        let mut informers = self
            .informers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(existing) = informers
            .get(&key)
            .and_then(|b| b.downcast_ref::<Informer<K>>())
            .filter(|i| !i.is_stopped())
        {
            return Ok(existing.clone());
        }
        // The key's selectors win over any `configure` set: the informer must
        // watch what later requests for this key expect.
        let informer = configure(Informer::builder(api))
            .selectors(
                label_selector.map(str::to_owned),
                field_selector.map(str::to_owned),
            )
            .start()?;
        informers.insert(key, Box::new(informer.clone()));
        Ok(informer)
    }

    /// How many distinct informers the factory runs.
    pub fn len(&self) -> usize {
        self.informers.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// True when the factory runs no informer yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
