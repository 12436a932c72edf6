//! Sharing one informer (one Reflector, one cache) among every subscriber of
//! the same resource, namespace and selectors, like client-go's
//! `SharedInformerFactory`.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use kinformer_actors::Object;
use kube::Api;
use kube::core::PartialObjectMeta;

use crate::error::InformerError;
use crate::informer::{Informer, InformerBuilder};
use crate::metadata::{MetadataScope, metadata_api};

/// Identifies a shared informer: object type (a metadata-only informer's
/// `PartialObjectMeta<K>` is a type of its own), resource path (with
/// namespace) and selectors.
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
///
/// The key holds the resource's URL path, not the cluster: use one factory
/// per `kube::Client` (per cluster and identity). The factory keeps every
/// informer it started running until [`InformerFactory::stop_all`] or until
/// the informer is stopped through one of its handles.
///
/// ```no_run
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// # use kinformer::InformerFactory;
/// # async fn run(client: kube::Client) -> Result<(), kinformer::InformerError> {
/// let factory = InformerFactory::new();
/// let api = kube::Api::<ConfigMap>::namespaced(client, "default");
/// let a = factory.informer(api.clone(), None, None, |b| b)?;
/// let b = factory.informer(api, None, None, |b| b)?; // the same informer: one watch
/// assert_eq!(factory.len(), 1);
/// factory.stop_all().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct InformerFactory {
    informers: Arc<Mutex<HashMap<InformerKey, Box<dyn Shared>>>>,
}

/// One informer of the factory, with its type erased.
trait Shared: Send + Sync {
    /// The `Informer<K>`, to downcast.
    fn as_any(&self) -> &dyn Any;
    fn is_stopped(&self) -> bool;
    fn stop(&self) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

impl<K: Object> Shared for Informer<K> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn is_stopped(&self) -> bool {
        Informer::is_stopped(self)
    }

    fn stop(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let informer = self.clone();
        Box::pin(async move { informer.stop().await })
    }
}

impl fmt::Debug for InformerFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerFactory")
            .field("running", &self.len())
            .finish_non_exhaustive()
    }
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
        if let Some(existing) = self.running::<K>(&key) {
            return Ok(existing);
        }
        // Built without the lock held: `configure` is the caller's code, and
        // may use the factory. The key's selectors win over any `configure`
        // set: the informer must watch what later requests for this key expect.
        let informer = configure(Informer::builder(api))
            .selectors(
                label_selector.map(str::to_owned),
                field_selector.map(str::to_owned),
            )
            .start()?;
        let mut informers = self.lock();
        if let Some(existing) = informers
            .get(&key)
            .and_then(|shared| shared.as_any().downcast_ref::<Informer<K>>())
            .filter(|i| !i.is_stopped())
        {
            // Another request for this key won the race: this informer's only
            // handle is dropped here, which stops it.
            return Ok(existing.clone());
        }
        // Stopped informers are forgotten, so the map does not keep them.
        informers.retain(|_, shared| !shared.is_stopped());
        informers.insert(key, Box::new(informer.clone()));
        Ok(informer)
    }

    /// The shared metadata-only informer ([`Informer::metadata`]) for `api`
    /// with these selectors. It is keyed apart from the full informer of the
    /// same resource (its object type differs): both may run side by side.
    pub fn metadata_informer<K>(
        &self,
        api: Api<K>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
        configure: impl FnOnce(
            InformerBuilder<PartialObjectMeta<K>>,
        ) -> InformerBuilder<PartialObjectMeta<K>>,
    ) -> Result<Informer<PartialObjectMeta<K>>, InformerError>
    where
        K: Object,
        K::DynamicType: Default,
        K::Scope: MetadataScope,
        PartialObjectMeta<K>: Object,
    {
        let api = metadata_api(api, &K::DynamicType::default());
        self.informer(api, label_selector, field_selector, configure)
    }

    fn running<K: Object>(&self, key: &InformerKey) -> Option<Informer<K>> {
        let mut informers = self.lock();
        // A stopped informer is let go here, not kept (with its listeners and
        // their subscribers) until another informer is added.
        informers.retain(|_, shared| !shared.is_stopped());
        informers
            .get(key)
            .and_then(|shared| shared.as_any().downcast_ref::<Informer<K>>())
            .cloned()
    }

    /// How many distinct informers the factory runs (stopped ones are let go).
    pub fn len(&self) -> usize {
        let mut informers = self.lock();
        informers.retain(|_, shared| !shared.is_stopped());
        informers.len()
    }

    /// Stops every informer the factory started and forgets them; handles
    /// held elsewhere then answer [`InformerError::Stopped`]. Later requests
    /// start new informers.
    pub async fn stop_all(&self) {
        let stops: Vec<_> = self.lock().drain().map(|(_, s)| s.stop()).collect();
        for stop in stops {
            stop.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<InformerKey, Box<dyn Shared>>> {
        self.informers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// True when the factory runs no informer yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
