//! The namespace lifecycle of a real API server: its NamespaceLifecycle
//! admission (no create in a namespace that does not exist, or that is
//! being deleted; the initial namespaces cannot be deleted) and its
//! namespace controller (a deleted namespace is `Terminating` until
//! everything in it is deleted, then it goes).
//!
//! As the CRD cleanup, the controller's work runs under the store's lock
//! right after the write that calls for it: deterministic, with the real
//! order of events (the namespace MODIFIED as terminating, its content
//! DELETED, then the namespace DELETED). Content held by finalizers keeps
//! the namespace terminating until the last of it goes.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::delete::{DeleteOptions, Propagation};
use crate::history::EventKind;
use crate::key::ObjKey;
use crate::object::{self, ObjectRecord};
use crate::resource::ResourceType;
use crate::status::ApiError;
use crate::store::{Inner, Store};

/// The finalizer in `spec.finalizers` that the namespace controller removes
/// once the namespace is empty.
pub const NAMESPACE_FINALIZER: &str = "kubernetes";

/// Namespaces that cannot be deleted (403), as on a real server.
pub const IMMORTAL: [&str; 3] = ["default", "kube-system", "kube-public"];

/// Whether `rt` is the Namespace type.
pub fn is_namespace_type(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "namespaces"
}

/// `spec.finalizers` of a namespace.
fn spec_finalizers(value: &Value) -> Vec<&str> {
    value
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether a namespace's `spec.finalizers` still hold its deletion.
pub(crate) fn held(value: &Value) -> bool {
    !spec_finalizers(value).is_empty()
}

/// A namespace as the server stores it on create: the `kubernetes`
/// finalizer in its spec and phase `Active`, whatever the body said.
pub(crate) fn prepare_create(body: &mut Value) {
    let Some(o) = body.as_object_mut() else {
        return;
    };
    let spec = o.entry("spec").or_insert_with(|| json!({}));
    if let Some(spec) = spec.as_object_mut() {
        let list = spec.entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut()
            && !list.iter().any(|f| f.as_str() == Some(NAMESPACE_FINALIZER))
        {
            list.push(Value::String(NAMESPACE_FINALIZER.into()));
        }
    }
    o.insert("status".into(), json!({"phase": "Active"}));
}

/// An update keeps a namespace's `spec.finalizers` and status as stored:
/// only the namespace controller changes them.
pub(crate) fn prepare_update(old: &Value, new: &mut Value) {
    let finalizers = old.pointer("/spec/finalizers").cloned();
    let status = old.get("status").cloned();
    let Some(o) = new.as_object_mut() else {
        return;
    };
    let spec = o.entry("spec").or_insert_with(|| json!({}));
    if let Some(spec) = spec.as_object_mut() {
        match finalizers {
            Some(f) => spec.insert("finalizers".into(), f),
            None => spec.remove("finalizers"),
        };
    }
    match status {
        Some(s) => o.insert("status".into(), s),
        None => o.remove("status"),
    };
}

/// A namespace's deletion starts: `deletionTimestamp` now, phase
/// `Terminating`.
pub(crate) fn mark_terminating(value: &mut Value) {
    object::mark_for_deletion(value, 0);
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("deletionGracePeriodSeconds");
    }
    if let Some(o) = value.as_object_mut() {
        o.insert("status".into(), json!({"phase": "Terminating"}));
    }
}

impl Store {
    /// The Namespace type's index, if served.
    fn namespace_res(&self) -> Option<usize> {
        self.registry().get("", "namespaces").map(|(i, _)| i)
    }

    /// NamespaceLifecycle for a create of `name` (`""` when generated) of
    /// type `rt` in namespace `ns`: 404 when the namespace does not exist
    /// (unless the store creates missing namespaces: then, if `create`, it
    /// does, never for a dry run), 403 while it is being deleted.
    pub(crate) fn admit_create(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        create: bool,
    ) -> Result<(), ApiError> {
        if !self.options.namespace_lifecycle || !rt.namespaced || ns.is_empty() {
            return Ok(());
        }
        let Some(ns_res) = self.namespace_res() else {
            return Ok(());
        };
        let stored = inner
            .objects
            .get(ns_res)
            .and_then(|m| m.get(&ObjKey::new("", ns)))
            .cloned();
        match stored {
            None if self.options.auto_create_namespaces => {
                if create {
                    self.create_namespace_locked(inner, ns_res, ns)?;
                }
                Ok(())
            }
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(record) if object::deletion_requested(&record.parsed()?) => Err(
                ApiError::namespace_terminating(&rt.group, &rt.plural, name, ns),
            ),
            Some(_) => Ok(()),
        }
    }

    fn create_namespace_locked(
        &self,
        inner: &mut Inner,
        ns_res: usize,
        name: &str,
    ) -> Result<Arc<ObjectRecord>, ApiError> {
        let rt = self.served_locked(ns_res)?;
        let rt = &*rt;
        let mut body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        object::stamp_new(rt, &mut body, inner.rv + 1);
        prepare_create(&mut body);
        let record = Arc::new(ObjectRecord::from_value(ObjKey::new("", name), &body)?);
        self.commit(inner, ns_res, EventKind::Added, record.clone(), None);
        Ok(record)
    }

    /// Creates namespace `name` unless it exists; answers whether it
    /// created it. What `kubectl create namespace` does before a test's
    /// objects go in.
    pub fn ensure_namespace(&self, name: &str) -> Result<bool, ApiError> {
        let Some(ns_res) = self.namespace_res() else {
            return Ok(false);
        };
        let mut inner = self.inner.lock();
        let exists = inner
            .objects
            .get(ns_res)
            .is_some_and(|m| m.contains_key(&ObjKey::new("", name)));
        if exists {
            return Ok(false);
        }
        self.create_namespace_locked(&mut inner, ns_res, name)?;
        Ok(true)
    }

    /// For the seeding and churn helpers, which write past admission:
    /// creates namespace `ns` if missing (as a test would first), and
    /// answers 403 while it is being deleted. Nothing without the lifecycle.
    pub(crate) fn open_namespace_for(&self, rt: &ResourceType, ns: &str) -> Result<(), ApiError> {
        if !self.options.namespace_lifecycle || !rt.namespaced || ns.is_empty() {
            return Ok(());
        }
        self.ensure_namespace(ns)?;
        if self.namespace_terminating(&self.inner.lock(), ns) {
            return Err(ApiError::namespace_terminating(
                &rt.group, &rt.plural, "", ns,
            ));
        }
        Ok(())
    }

    /// Whether namespace `ns` is being deleted. Every namespaced delete
    /// asks: the stored JSON is parsed only if it names a deletionTimestamp.
    pub(crate) fn namespace_terminating(&self, inner: &Inner, ns: &str) -> bool {
        const MARK: &[u8] = b"\"deletionTimestamp\"";
        self.namespace_res()
            .and_then(|r| inner.objects.get(r))
            .and_then(|m| m.get(&ObjKey::new("", ns)))
            .filter(|r| r.json.windows(MARK.len()).any(|w| w == MARK))
            .and_then(|r| r.parsed().ok())
            .is_some_and(|v| object::deletion_requested(&v))
    }

    /// The namespace `ns` being deleted and held by [`NAMESPACE_FINALIZER`],
    /// as stored.
    fn held_namespace(&self, inner: &Inner, ns: &str) -> Option<(usize, Arc<ObjectRecord>, Value)> {
        let ns_res = self.namespace_res()?;
        let stored = inner
            .objects
            .get(ns_res)?
            .get(&ObjKey::new("", ns))?
            .clone();
        let value = stored.parsed().ok()?;
        (object::deletion_requested(&value)
            && spec_finalizers(&value).contains(&NAMESPACE_FINALIZER))
        .then_some((ns_res, stored, value))
    }

    fn namespaced_types(&self) -> Vec<(usize, Arc<ResourceType>)> {
        self.registry()
            .types()
            .iter()
            .cloned()
            .enumerate()
            .filter(|(_, rt)| rt.namespaced)
            .collect()
    }

    /// The namespace controller's work on namespace `ns`, if it is being
    /// deleted and still held by [`NAMESPACE_FINALIZER`]: deletes what is
    /// in it (in the background, as the real controller does, and at once:
    /// no kubelet finishes a Pod's grace period here), then
    /// [`namespace_content_gone`](Self::namespace_content_gone).
    pub(crate) fn namespace_cleanup(&self, inner: &mut Inner, ns: &str) {
        if self.held_namespace(inner, ns).is_none() {
            return;
        }
        let options = DeleteOptions {
            propagation: Some(Propagation::Background),
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        for (res, rt) in self.namespaced_types() {
            let content: Vec<Arc<ObjectRecord>> = inner
                .objects
                .get(res)
                .map(|m| {
                    m.range(ObjKey::new(ns, "")..)
                        .take_while(|(k, _)| *k.namespace == *ns)
                        .map(|(_, r)| r.clone())
                        .collect()
                })
                .unwrap_or_default();
            // Marked ones too: a grace period nobody ends here ends now;
            // finalizers keep holding theirs.
            for record in content {
                match self.delete_locked(inner, &rt, res, &record.key, &options) {
                    Ok((_, Some(kind))) => self.after_crd_write(inner, &rt, res, &record.key, kind),
                    Ok((_, None)) => {}
                    // Gone already (a CRD's cleanup took its objects).
                    Err(e) if e.reason == crate::status::Reason::NotFound => {}
                    Err(e) => {
                        tracing::warn!(error = %e, namespace = ns, object = %record.key.name, "could not delete an object of a deleted namespace");
                    }
                }
            }
        }
        self.namespace_content_gone(inner, ns);
    }

    /// Once nothing is left in terminating namespace `ns` (what the cleanup
    /// did not delete at once is marked, held by finalizers, and nothing new
    /// goes in: a look per type, no object read), removes
    /// [`NAMESPACE_FINALIZER`], and the namespace with it unless other
    /// finalizers hold it.
    pub(crate) fn namespace_content_gone(&self, inner: &mut Inner, ns: &str) {
        let left = self.namespaced_types().iter().any(|(res, _)| {
            inner.objects.get(*res).is_some_and(|m| {
                m.range(ObjKey::new(ns, "")..)
                    .next()
                    .is_some_and(|(k, _)| *k.namespace == *ns)
            })
        });
        if left {
            return;
        }
        let Some((ns_res, stored, value)) = self.held_namespace(inner, ns) else {
            return;
        };
        let key = stored.key.clone();
        let mut value = value;
        if let Some(list) = value
            .pointer_mut("/spec/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f.as_str() != Some(NAMESPACE_FINALIZER));
        }
        let kind = if object::has_finalizers(&value) || held(&value) {
            EventKind::Modified
        } else {
            EventKind::Deleted
        };
        object::set_resource_version(&mut value, inner.rv + 1);
        let Ok(record) = ObjectRecord::from_value(key, &value) else {
            return;
        };
        self.commit(inner, ns_res, kind, Arc::new(record), Some(stored));
    }

    /// Resumes the deletion of every terminating namespace (after a
    /// restore, which bypasses the write path). Idempotent.
    pub fn sync_namespaces(&self) {
        let Some(ns_res) = self.namespace_res() else {
            return;
        };
        let mut inner = self.inner.lock();
        for name in inner.names_of(ns_res) {
            self.namespace_cleanup(&mut inner, &name);
        }
    }
}
