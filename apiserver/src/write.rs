//! The write path: create, update, patch (read-modify-write), delete and deletecollection,
//! with the rules a real server's registry applies on the way (validation, generation,
//! status subresources, managedFields, finalizers, graceful deletion, propagation policy)
//! and what a CustomResourceDefinition's writes do to the served types.

use std::sync::Arc;

use serde_json::Value;

use crate::crd::{self, CLEANUP_FINALIZER, CRD_GROUP, CRD_PLURAL};
use crate::delete::{DeleteOptions, DeletePreconditions, Propagation};
use crate::history::EventKind;
use crate::key::ObjKey;
use crate::managed_fields::{self, FieldWrite, Operation};
use crate::namespace;
use crate::object::{self, ObjectRecord, set_resource_version};
use crate::resource::{ResourceType, StatusRule};
use crate::schema;
use crate::selector::ObjectFilter;
use crate::status::{ApiError, Reason};
use crate::store::{Inner, Store};
use crate::validation::{
    body_name, check_body, resolve_name_for_create, resolve_namespace, validate_metadata,
};

/// The manager of writes made in-process (no User-Agent, no `fieldManager`).
pub const IN_PROCESS_MANAGER: &str = "kinformer-apiserver";

/// The finalizer a `propagationPolicy: Orphan` delete adds.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The finalizer a `propagationPolicy: Foreground` delete adds.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// A subresource a write goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// `/status`: only `status` changes.
    Status,
    /// `/scale`: the caller's function writes the replica count.
    Scale,
}

impl Subresource {
    fn as_str(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Scale => "scale",
        }
    }
}

/// What a write request carries besides its body.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun`: validated, answered, not stored.
    pub dry_run: bool,
    /// The served version the request addressed (`None`: the storage version).
    pub version: Option<String>,
    /// The field manager (`None`: [`IN_PROCESS_MANAGER`]).
    pub manager: Option<String>,
    /// The subresource written through.
    pub subresource: Option<Subresource>,
    /// For a server-side apply: the applied configuration.
    pub applied: Option<Value>,
}

impl WriteOptions {
    /// Only `dry_run` set.
    pub fn dry_run(dry_run: bool) -> Self {
        WriteOptions {
            dry_run,
            ..Default::default()
        }
    }
}

/// The outcome of a delete.
#[derive(Debug, Clone)]
pub struct Deletion {
    /// The object as the delete left it: its final state when gone, else marked with
    /// `deletionTimestamp`.
    pub record: Arc<ObjectRecord>,
    /// Whether it is gone now (not held by finalizers or a grace period).
    pub deleted: bool,
}

fn version_of<'a>(rt: &'a ResourceType, opts: &'a WriteOptions) -> &'a str {
    opts.version.as_deref().unwrap_or(&rt.version)
}

/// The object as a request at `version` sees it (only `apiVersion` differs).
fn at_version(mut v: Value, rt: &ResourceType, version: &str) -> Value {
    if version != rt.version
        && let Some(o) = v.as_object_mut()
    {
        o.insert(
            "apiVersion".into(),
            Value::String(rt.api_version_of(version)),
        );
    }
    v
}

/// The grace period a delete of this object waits for, if any: Pods that are scheduled and
/// not finished, `gracePeriodSeconds` or `spec.terminationGracePeriodSeconds` (default 30).
fn grace_period(rt: &ResourceType, obj: &Value, requested: Option<u64>) -> Option<u64> {
    if !rt.graceful_deletion {
        return None;
    }
    let scheduled = obj
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        obj.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !scheduled || finished {
        return None;
    }
    let grace = requested.unwrap_or_else(|| {
        obj.pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(30)
    });
    (grace > 0).then_some(grace)
}

/// The error of a write to a type whose CRD is being deleted.
fn terminating(rt: &ResourceType) -> ApiError {
    ApiError::new(
        Reason::MethodNotAllowed,
        format!(
            "create not allowed while custom resource definition is terminating ({}.{})",
            rt.plural, rt.group
        ),
    )
}

impl Store {
    pub(crate) fn served_locked(&self, res: usize) -> Result<Arc<ResourceType>, ApiError> {
        self.rt(res)
    }

    /// The index of the CRD type, if served.
    fn crd_res(&self) -> Option<usize> {
        self.registry().get(CRD_GROUP, CRD_PLURAL).map(|(i, _)| i)
    }

    fn field_write_time() -> String {
        object::now_timestamp()
    }

    fn record_fields(
        &self,
        rt: &ResourceType,
        opts: &WriteOptions,
        old: Option<&Value>,
        new: &mut Value,
    ) {
        if !self.options.managed_fields {
            return;
        }
        let api_version = rt.api_version_of(version_of(rt, opts));
        let time = Self::field_write_time();
        let write = FieldWrite {
            manager: opts.manager.as_deref().unwrap_or(IN_PROCESS_MANAGER),
            operation: if opts.applied.is_some() {
                Operation::Apply
            } else {
                Operation::Update
            },
            api_version: &api_version,
            subresource: opts.subresource.map(Subresource::as_str),
            applied: opts.applied.as_ref(),
            time: &time,
        };
        managed_fields::record(old, new, &write);
    }

    fn validate_custom(
        &self,
        rt: &ResourceType,
        version: &str,
        body: &Value,
        name: &str,
    ) -> Result<(), ApiError> {
        let Some(schema) = rt.schema(version) else {
            return Ok(());
        };
        let violations = schema::validate(schema, body);
        let causes: Vec<(String, &'static str, String)> = violations
            .into_iter()
            .map(|v| (v.field, v.reason, v.message))
            .collect();
        crate::status::invalid_with_causes(
            &format!("{}.{}", rt.kind, rt.group),
            &rt.kind,
            Some(&rt.group),
            name,
            &causes,
        )
    }

    /// The CRD (name) serving type `res`, if `res` is a custom resource type.
    fn crd_of(inner: &Inner, res: usize) -> Option<String> {
        inner
            .crd_types
            .iter()
            .find(|(_, i)| **i == res)
            .map(|(n, _)| n.clone())
    }

    fn crd_terminating(&self, inner: &Inner, res: usize) -> bool {
        let (Some(name), Some(crd_res)) = (Self::crd_of(inner, res), self.crd_res()) else {
            return false;
        };
        inner
            .objects
            .get(crd_res)
            .and_then(|m| m.get(&ObjKey::new("", &name)))
            .and_then(|r| r.parsed().ok())
            .is_some_and(|v| object::deletion_requested(&v))
    }

    /// Create an object (fills uid, creationTimestamp, generation, resourceVersion; honours generateName).
    pub fn create(
        &self,
        res: usize,
        namespace: Option<&str>,
        body: Value,
        dry_run: bool,
    ) -> Result<Arc<ObjectRecord>, ApiError> {
        self.create_with(res, namespace, body, &WriteOptions::dry_run(dry_run))
    }

    /// [`create`](Self::create) with the request's options.
    pub fn create_with(
        &self,
        res: usize,
        namespace: Option<&str>,
        mut body: Value,
        opts: &WriteOptions,
    ) -> Result<Arc<ObjectRecord>, ApiError> {
        let rt = self.rt(res)?;
        let version = version_of(&rt, opts);
        check_body(&rt, version, &mut body)?;
        let ns = resolve_namespace(&rt, &mut body, namespace)?;
        // Admission (NamespaceLifecycle) answers before validation does.
        let requested = body_name(&body).ok().flatten().unwrap_or_default();
        self.admit_create(&mut self.inner.lock(), &rt, &ns, &requested, false)?;
        let name = resolve_name_for_create(&rt, &mut body)?;
        validate_metadata(&rt, &body, &name)?;
        self.validate_custom(&rt, version, &body, &name)?;
        let defined = if crd::is_crd_type(&rt) {
            Some(crd::resource_type(&body)?)
        } else {
            None
        };
        let key = ObjKey::new(&ns, &name);
        let mut inner = self.inner.lock();
        let rt = self.served_locked(res)?;
        // Again under this lock: the namespace may have gone meanwhile.
        self.admit_create(&mut inner, &rt, &ns, &requested, false)?;
        if inner.objects.get(res).is_some_and(|m| m.contains_key(&key)) {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        if rt.custom && self.crd_terminating(&inner, res) {
            return Err(terminating(&rt));
        }
        // As the real server's storage: a create names no version ("0" is none).
        if object::resource_version_of(&body)?.is_some_and(|v| v != 0) {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        // A missing namespace is created (if so configured) only once the
        // create can no longer fail, and never for a dry run.
        if !opts.dry_run {
            self.admit_create(&mut inner, &rt, &ns, &requested, true)?;
        }
        let rv = inner.rv + 1;
        object::stamp_new(&rt, &mut body, rv);
        if self.options.namespace_lifecycle && namespace::is_namespace_type(&rt) {
            namespace::prepare_create(&mut body);
        }
        let mut conflict = None;
        if let Some(defined) = &defined {
            object::add_finalizer(&mut body, CLEANUP_FINALIZER);
            conflict = self
                .registry()
                .get(&defined.group, &defined.plural)
                .map(|_| format!("\"{}\" is already in use", defined.plural));
            let status = crd::status(
                &body,
                defined,
                conflict.as_deref(),
                false,
                &object::now_timestamp(),
            );
            if let Some(o) = body.as_object_mut() {
                o.insert("status".into(), status);
            }
        }
        self.record_fields(&rt, opts, None, &mut body);
        let record = Arc::new(ObjectRecord::from_value(key, &body)?);
        let record = self.commit_unless_dry_run(
            &mut inner,
            res,
            EventKind::Added,
            record,
            None,
            opts.dry_run,
        );
        if let (Some(defined), None, false) = (defined, conflict, opts.dry_run) {
            self.register_crd_type(&mut inner, &name, defined);
        }
        Ok(record)
    }

    fn register_crd_type(&self, inner: &mut Inner, crd_name: &str, rt: ResourceType) {
        let mut added = None;
        self.update_registry(inner, |reg| added = reg.add(rt).ok());
        if let Some(idx) = added {
            inner.crd_types.insert(crd_name.to_string(), idx);
        }
    }

    /// Replace an object (PUT). A `metadata.resourceVersion` in the body must match (else 409);
    /// without one the update is unconditional. `url_name` is the name in the path, if any.
    pub fn update(
        &self,
        res: usize,
        namespace: Option<&str>,
        url_name: Option<&str>,
        body: Value,
        dry_run: bool,
    ) -> Result<Arc<ObjectRecord>, ApiError> {
        self.update_with(
            res,
            namespace,
            url_name,
            body,
            &WriteOptions::dry_run(dry_run),
        )
    }

    /// [`update`](Self::update) with the request's options.
    pub fn update_with(
        &self,
        res: usize,
        namespace: Option<&str>,
        url_name: Option<&str>,
        mut body: Value,
        opts: &WriteOptions,
    ) -> Result<Arc<ObjectRecord>, ApiError> {
        let rt = self.rt(res)?;
        check_body(&rt, version_of(&rt, opts), &mut body)?;
        let ns = resolve_namespace(&rt, &mut body, namespace)?;
        let name = match (body_name(&body)?, url_name) {
            (Some(b), Some(u)) if b != u => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({b}) does not match the name on the URL ({u})"
                )));
            }
            (Some(b), _) => b,
            (None, Some(u)) => {
                if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("name".into(), Value::String(u.to_string()));
                }
                u.to_string()
            }
            (None, None) => {
                return Err(ApiError::invalid(
                    &rt.kind,
                    "",
                    "metadata.name",
                    "FieldValueRequired",
                    "Required value: name is required",
                ));
            }
        };
        // As the real server: a custom resource is never updated without a
        // resourceVersion; a built-in one is, and "0" means none.
        if object::resource_version_of(&body)?.is_none_or(|v| v == 0) {
            if rt.custom {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &name,
                    "metadata.resourceVersion",
                    "FieldValueInvalid",
                    "Invalid value: 0x0: must be specified for an update",
                ));
            }
            if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
            }
        }
        // The body's uid, if any, is a precondition: never another object's.
        let uid_of = |v: &Value| {
            v.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
        };
        let given_uid = uid_of(&body);
        let key = ObjKey::new(&ns, &name);
        // The body is at the storage version now: the function sees it as the request did.
        let version = version_of(&rt, opts).to_string();
        let body = at_version(body, &rt, &version);
        self.modify_with(res, &key, opts, |current| {
            if let (Some(given), Some(stored)) = (&given_uid, uid_of(&current))
                && *given != stored
            {
                return Err(ApiError::uid_conflict(
                    &rt.group, &rt.plural, &name, given, &stored,
                ));
            }
            Ok(body)
        })
    }

    /// Read-modify-write under the store lock (patches use it): `f` gets the current object
    /// and returns the new one; preconditions, validation and no-op detection follow.
    pub fn modify(
        &self,
        res: usize,
        key: &ObjKey,
        dry_run: bool,
        f: impl FnOnce(Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<ObjectRecord>, ApiError> {
        self.modify_with(res, key, &WriteOptions::dry_run(dry_run), f)
    }

    /// [`modify`](Self::modify) with the request's options; `f` sees the object at the
    /// request's version.
    pub fn modify_with(
        &self,
        res: usize,
        key: &ObjKey,
        opts: &WriteOptions,
        f: impl FnOnce(Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<ObjectRecord>, ApiError> {
        let mut inner = self.inner.lock();
        let rt = self.served_locked(res)?;
        let (record, kind) = self.modify_locked(&mut inner, &rt, res, key, opts, f)?;
        if !opts.dry_run
            && let Some(kind) = kind
        {
            self.after_write(&mut inner, &rt, res, key, kind);
        }
        Ok(record)
    }

    /// The write of [`modify_with`](Self::modify_with); the event kind committed, if any.
    fn modify_locked(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        res: usize,
        key: &ObjKey,
        opts: &WriteOptions,
        f: impl FnOnce(Value) -> Result<Value, ApiError>,
    ) -> Result<(Arc<ObjectRecord>, Option<EventKind>), ApiError> {
        let Some(existing) = inner.objects.get(res).and_then(|m| m.get(key)).cloned() else {
            return Err(ApiError::not_found(&rt.group, &rt.plural, &key.name));
        };
        let version = version_of(rt, opts).to_string();
        let old = existing.parsed()?;
        let mut new = f(at_version(old.clone(), rt, &version))?;
        check_body(rt, &version, &mut new)?;
        match (opts.subresource, rt.status) {
            (Some(Subresource::Status), _) => new = object::only_status(&old, &new),
            (_, StatusRule::Separate) => object::keep_status(&old, &mut new),
            _ => {}
        }
        let ns_in_body = new
            .get("metadata")
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if rt.namespaced && !ns_in_body.is_empty() && ns_in_body != *key.namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            if rt.namespaced {
                meta.insert("namespace".into(), Value::String(key.namespace.to_string()));
            } else {
                meta.remove("namespace");
            }
        }
        match body_name(&new)? {
            Some(n) if n == *key.name => {}
            Some(n) => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({})",
                    key.name
                )));
            }
            None => {
                if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("name".into(), Value::String(key.name.to_string()));
                }
            }
        }
        if let Some(expected) = object::resource_version_of(&new)?
            && expected != existing.rv
        {
            return Err(ApiError::conflict(&rt.group, &rt.plural, &key.name));
        }
        validate_metadata(rt, &new, &key.name)?;
        self.validate_custom(rt, &version, &new, &key.name)?;
        // A uid that differs is refused as the real server's metadata
        // validation does (an update's body uid was a precondition before).
        if let Some(uid) = new.pointer("/metadata/uid").and_then(Value::as_str)
            && !uid.is_empty()
            && uid != existing.uid
        {
            return Err(ApiError::invalid(
                &rt.kind,
                &key.name,
                "metadata.uid",
                "FieldValueInvalid",
                &format!("Invalid value: \"{uid}\": field is immutable"),
            ));
        }
        // As the real server: an object being deleted takes no new finalizers.
        if object::deletion_requested(&old) {
            let before = object::finalizers(&old);
            if object::finalizers(&new).iter().any(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &key.name,
                    "metadata.finalizers",
                    "FieldValueForbidden",
                    "Forbidden: no new finalizers can be added if the object is being deleted",
                ));
            }
        }
        if crd::is_crd_type(rt) {
            self.crd_status_for_update(inner, &old, &mut new)?;
        }
        if self.options.namespace_lifecycle
            && namespace::is_namespace_type(rt)
            && opts.subresource != Some(Subresource::Status)
        {
            namespace::prepare_update(&old, &mut new);
        }
        if self.options.managed_fields {
            managed_fields::carry(&old, &mut new);
        }
        if !object::carry_over_for_update(rt, &old, &mut new) {
            return Ok((existing, None));
        }
        self.record_fields(rt, opts, Some(&old), &mut new);
        let rv = inner.rv + 1;
        // A marked object whose last finalizer this update removes is deleted instead, as
        // it was stored (when no grace period holds it): the real server deletes the
        // stored object (its DELETED event carries the previous labels, which is what a
        // selector watch needs to see it go) and never applies the update.
        let no_grace = old
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            == 0;
        let held = self.options.namespace_lifecycle
            && namespace::is_namespace_type(rt)
            && namespace::held(&new);
        let (kind, mut stored) = if object::deletion_requested(&new)
            && !object::has_finalizers(&new)
            && no_grace
            && !held
        {
            (EventKind::Deleted, old)
        } else {
            (EventKind::Modified, new)
        };
        set_resource_version(&mut stored, rv);
        let record = Arc::new(ObjectRecord::from_value(key.clone(), &stored)?);
        let record =
            self.commit_unless_dry_run(inner, res, kind, record, Some(existing), opts.dry_run);
        Ok((record, Some(kind)))
    }

    /// A CRD update: the new spec must define a valid type with the same group, plural and
    /// scope; its status is what the controllers would write.
    fn crd_status_for_update(
        &self,
        inner: &Inner,
        old: &Value,
        new: &mut Value,
    ) -> Result<(), ApiError> {
        let defined = crd::resource_type(new)?;
        if let Ok(before) = crd::resource_type(old)
            && let Some(field) = crd::immutable_change(&before, &defined)
        {
            let name = new
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            return Err(ApiError::invalid(
                "CustomResourceDefinition.apiextensions.k8s.io",
                name,
                field,
                "FieldValueInvalid",
                "Invalid value: field is immutable",
            ));
        }
        let name = new
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let registered = inner.crd_types.get(&name).copied();
        let conflict = match (
            registered,
            self.registry().get(&defined.group, &defined.plural),
        ) {
            (Some(mine), Some((idx, _))) if mine != idx => {
                Some(format!("\"{}\" is already in use", defined.plural))
            }
            (None, Some(_)) => Some(format!("\"{}\" is already in use", defined.plural)),
            _ => None,
        };
        let status = crd::status(
            old,
            &defined,
            conflict.as_deref(),
            object::deletion_requested(new),
            &object::now_timestamp(),
        );
        if let Some(o) = new.as_object_mut() {
            o.insert("status".into(), status);
        }
        Ok(())
    }

    /// What a committed write does beyond the object: a CRD's type follows its CRD, the
    /// deletion of a CRD (or of the last object it waits for) proceeds, and so does the
    /// deletion of a namespace (or of the last object in it).
    fn after_write(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        res: usize,
        key: &ObjKey,
        kind: EventKind,
    ) {
        self.after_crd_write(inner, rt, res, key, kind);
        if !self.options.namespace_lifecycle {
            return;
        }
        if namespace::is_namespace_type(rt) && kind == EventKind::Modified {
            self.namespace_cleanup(inner, &key.name);
        } else if rt.namespaced
            && kind == EventKind::Deleted
            && self.namespace_terminating(inner, &key.namespace)
        {
            self.namespace_content_gone(inner, &key.namespace);
        }
    }

    /// The CRD part of [`after_write`](Self::after_write).
    pub(crate) fn after_crd_write(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        res: usize,
        key: &ObjKey,
        kind: EventKind,
    ) {
        if crd::is_crd_type(rt) {
            let name = key.name.to_string();
            match kind {
                EventKind::Deleted => self.retire_crd_type(inner, &name),
                _ => {
                    self.sync_crd_type(inner, res, &name);
                    self.crd_cleanup(inner, &name);
                }
            }
        } else if rt.custom
            && kind == EventKind::Deleted
            && let Some(crd_name) = Self::crd_of(inner, res)
        {
            self.crd_cleanup(inner, &crd_name);
        }
    }

    /// Register (or update) the type of every stored CRD: for objects put into the store by
    /// other means than the write path (loaded from disk, say). Idempotent.
    pub fn sync_crd_types(&self) {
        let Some(crd_res) = self.crd_res() else {
            return;
        };
        let mut inner = self.inner.lock();
        for name in inner.names_of(crd_res) {
            self.sync_crd_type(&mut inner, crd_res, &name);
        }
    }

    /// Register or update the type of a stored CRD.
    fn sync_crd_type(&self, inner: &mut Inner, crd_res: usize, name: &str) {
        let Some(value) = inner
            .objects
            .get(crd_res)
            .and_then(|m| m.get(&ObjKey::new("", name)))
            .and_then(|r| r.parsed().ok())
        else {
            return;
        };
        let Ok(defined) = crd::resource_type(&value) else {
            return;
        };
        match inner.crd_types.get(name).copied() {
            Some(idx) => self.update_registry(inner, |reg| reg.replace(idx, defined)),
            None => self.register_crd_type(inner, name, defined),
        }
    }

    /// Delete a terminating CRD's objects; once none is left, drop its finalizer (and the
    /// CRD with it, when no other finalizer holds it).
    fn crd_cleanup(&self, inner: &mut Inner, crd_name: &str) {
        let Some(crd_res) = self.crd_res() else {
            return;
        };
        let crd_key = ObjKey::new("", crd_name);
        let Some(crd_rec) = inner
            .objects
            .get(crd_res)
            .and_then(|m| m.get(&crd_key))
            .cloned()
        else {
            return;
        };
        let Ok(crd_value) = crd_rec.parsed() else {
            return;
        };
        if !object::deletion_requested(&crd_value)
            || !object::finalizers(&crd_value).contains(&CLEANUP_FINALIZER)
        {
            return;
        }
        if let Some(idx) = inner.crd_types.get(crd_name).copied()
            && let Some(cr_rt) = self.registry().types().get(idx).cloned()
        {
            let keys: Vec<ObjKey> = inner
                .objects
                .get(idx)
                .map(|m| {
                    m.values()
                        .filter(|r| r.parsed().is_ok_and(|v| !object::deletion_requested(&v)))
                        .map(|r| r.key.clone())
                        .collect()
                })
                .unwrap_or_default();
            for key in keys {
                if let Err(e) =
                    self.delete_locked(inner, &cr_rt, idx, &key, &DeleteOptions::default())
                {
                    tracing::warn!(error = %e, object = %key.name, "could not delete a custom resource of a deleted CRD");
                }
            }
            if inner.objects.get(idx).is_some_and(|m| !m.is_empty()) {
                return;
            }
        }
        let mut value = crd_value;
        object::remove_finalizer(&mut value, CLEANUP_FINALIZER);
        let rv = inner.rv + 1;
        let kind = if object::has_finalizers(&value) {
            EventKind::Modified
        } else {
            EventKind::Deleted
        };
        set_resource_version(&mut value, rv);
        let Ok(record) = ObjectRecord::from_value(crd_key, &value) else {
            return;
        };
        self.commit(inner, crd_res, kind, Arc::new(record), Some(crd_rec));
        if kind == EventKind::Deleted {
            self.retire_crd_type(inner, crd_name);
        }
    }

    /// The CRD is gone: its objects go (DELETED to their watchers), its watches end, its
    /// type is served no more.
    fn retire_crd_type(&self, inner: &mut Inner, crd_name: &str) {
        let Some(idx) = inner.crd_types.remove(crd_name) else {
            return;
        };
        let left: Vec<Arc<ObjectRecord>> = inner
            .objects
            .get(idx)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let mut namespaces = std::collections::BTreeSet::new();
        for rec in left {
            let rv = inner.rv + 1;
            namespaces.insert(rec.key.namespace.clone());
            match rec.restamped(rv) {
                Ok(gone) => self.commit(inner, idx, EventKind::Deleted, Arc::new(gone), Some(rec)),
                Err(e) => tracing::warn!(error = %e, "dropping an unreadable custom resource"),
            }
        }
        self.close_watchers_of(inner, idx);
        self.update_registry(inner, |reg| reg.retire(idx));
        // Their namespaces may be terminating, waiting for them.
        if self.options.namespace_lifecycle {
            for ns in namespaces.iter().filter(|ns| !ns.is_empty()) {
                if self.namespace_terminating(inner, ns) {
                    self.namespace_content_gone(inner, ns);
                }
            }
        }
    }

    /// Delete an object; returns its final state (stamped with the deletion RV) and emits
    /// DELETED, or the object marked for deletion when finalizers or a grace period hold it.
    pub fn delete(
        &self,
        res: usize,
        key: &ObjKey,
        pre: &DeletePreconditions,
        dry_run: bool,
    ) -> Result<Arc<ObjectRecord>, ApiError> {
        let opts = DeleteOptions {
            preconditions: pre.clone(),
            dry_run,
            ..Default::default()
        };
        Ok(self.delete_with(res, key, &opts)?.record)
    }

    /// Delete with every `DeleteOptions` field honoured.
    pub fn delete_with(
        &self,
        res: usize,
        key: &ObjKey,
        opts: &DeleteOptions,
    ) -> Result<Deletion, ApiError> {
        let mut inner = self.inner.lock();
        let rt = self.served_locked(res)?;
        let (deletion, kind) = self.delete_locked(&mut inner, &rt, res, key, opts)?;
        if !opts.dry_run
            && let Some(kind) = kind
        {
            self.after_write(&mut inner, &rt, res, key, kind);
        }
        Ok(deletion)
    }

    pub(crate) fn delete_locked(
        &self,
        inner: &mut Inner,
        rt: &ResourceType,
        res: usize,
        key: &ObjKey,
        opts: &DeleteOptions,
    ) -> Result<(Deletion, Option<EventKind>), ApiError> {
        let Some(existing) = inner.objects.get(res).and_then(|m| m.get(key)).cloned() else {
            return Err(ApiError::not_found(&rt.group, &rt.plural, &key.name));
        };
        // The namespace controller's finalizer holds a namespace's deletion
        // until it is empty (see `namespace.rs`).
        let lifecycle = self.options.namespace_lifecycle && namespace::is_namespace_type(rt);
        if lifecycle && namespace::IMMORTAL.contains(&&*key.name) {
            return Err(ApiError::forbidden(
                "",
                "namespaces",
                &key.name,
                "this namespace may not be deleted",
            ));
        }
        let pre = &opts.preconditions;
        if let Some(uid) = &pre.uid
            && *uid != existing.uid
        {
            return Err(ApiError::uid_conflict(
                &rt.group,
                &rt.plural,
                &key.name,
                uid,
                &existing.uid,
            ));
        }
        if let Some(rv) = pre.resource_version
            && rv != existing.rv
        {
            return Err(ApiError::new(
                Reason::Conflict,
                format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    existing.rv
                ),
            ));
        }
        let mut current = existing.parsed()?;
        let policy = if self.options.garbage_collection {
            opts.propagation
                .or(rt.orphans_by_default.then_some(Propagation::Orphan))
        } else {
            None
        };
        let gc_finalizer = match policy {
            Some(Propagation::Orphan) => Some(ORPHAN_FINALIZER),
            Some(Propagation::Foreground) => Some(FOREGROUND_FINALIZER),
            _ => None,
        };
        let rv = inner.rv + 1;
        if lifecycle && object::deletion_requested(&current) && namespace::held(&current) {
            return Err(ApiError::namespace_being_deleted(&key.name));
        }
        let kind = if object::deletion_requested(&current) {
            // Already being deleted: a propagation policy may add its finalizer, and
            // `gracePeriodSeconds=0` ends a grace period; anything else changes nothing.
            let adds = gc_finalizer.filter(|f| !object::finalizers(&current).contains(f));
            let force = opts.grace_period_seconds == Some(0)
                && !object::has_finalizers(&current)
                && !(lifecycle && namespace::held(&current));
            if force {
                EventKind::Deleted
            } else if let Some(f) = adds {
                object::add_finalizer(&mut current, f);
                EventKind::Modified
            } else {
                let unchanged = Deletion {
                    record: existing,
                    deleted: false,
                };
                return Ok((unchanged, None));
            }
        } else {
            if let Some(f) = gc_finalizer {
                object::add_finalizer(&mut current, f);
            }
            let grace = grace_period(rt, &current, opts.grace_period_seconds);
            if lifecycle && namespace::held(&current) {
                namespace::mark_terminating(&mut current);
                EventKind::Modified
            } else if object::has_finalizers(&current) || grace.is_some() {
                object::mark_for_deletion(&mut current, grace.unwrap_or(0));
                if crd::is_crd_type(rt) {
                    let registered = inner.crd_types.contains_key(&*key.name);
                    self.crd_terminating_status(&mut current, registered);
                }
                EventKind::Modified
            } else {
                EventKind::Deleted
            }
        };
        if gc_finalizer.is_some() && kind == EventKind::Modified && !opts.dry_run {
            inner.gc_owners.insert((res, key.clone()));
        }
        set_resource_version(&mut current, rv);
        let record = Arc::new(ObjectRecord::from_value(key.clone(), &current)?);
        let record =
            self.commit_unless_dry_run(inner, res, kind, record, Some(existing), opts.dry_run);
        let deletion = Deletion {
            record,
            deleted: kind == EventKind::Deleted,
        };
        Ok((deletion, Some(kind)))
    }

    fn crd_terminating_status(&self, crd_value: &mut Value, registered: bool) {
        if let Ok(defined) = crd::resource_type(crd_value) {
            let conflict =
                (!registered).then(|| format!("\"{}\" is already in use", defined.plural));
            let status = crd::status(
                crd_value,
                &defined,
                conflict.as_deref(),
                true,
                &object::now_timestamp(),
            );
            if let Some(o) = crd_value.as_object_mut() {
                o.insert("status".into(), status);
            }
        }
    }

    /// Delete every object the filter selects; returns the final states.
    pub fn delete_collection(
        &self,
        res: usize,
        filter: &ObjectFilter,
        dry_run: bool,
    ) -> Result<Vec<Arc<ObjectRecord>>, ApiError> {
        let opts = DeleteOptions {
            dry_run,
            ..Default::default()
        };
        self.delete_collection_with(res, filter, &opts)
    }

    /// [`delete_collection`](Self::delete_collection) with `DeleteOptions`.
    pub fn delete_collection_with(
        &self,
        res: usize,
        filter: &ObjectFilter,
        opts: &DeleteOptions,
    ) -> Result<Vec<Arc<ObjectRecord>>, ApiError> {
        let keys: Vec<ObjKey> = {
            let inner = self.inner.lock();
            inner
                .objects
                .get(res)
                .map(|m| {
                    m.values()
                        .filter(|r| filter.matches(r))
                        .map(|r| r.key.clone())
                        .collect()
                })
                .unwrap_or_default()
        };
        let opts = DeleteOptions {
            preconditions: DeletePreconditions::default(),
            ..opts.clone()
        };
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            match self.delete_with(res, &key, &opts) {
                Ok(d) => out.push(d.record),
                Err(e) if e.reason == Reason::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    fn crd() -> Value {
        json!({"metadata": {"name": "foos.example.org"}, "spec": {
            "group": "example.org", "scope": "Namespaced", "names": {"plural": "foos", "kind": "Foo"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]
        }})
    }

    #[test]
    fn a_crd_registers_its_type_once_and_a_dry_run_registers_nothing() {
        let s = Store::new(Registry::new(ResourceType::defaults()), 100, 10);
        let crds = s.resolve(CRD_GROUP, CRD_PLURAL).unwrap();
        s.create(crds, None, crd(), true).unwrap();
        assert!(s.resolve("example.org", "foos").is_err(), "dry run");
        s.create(crds, None, crd(), false).unwrap();
        let foos = s.resolve("example.org", "foos").unwrap();
        let types = s.registry().types().len();
        s.sync_crd_types();
        s.sync_crd_types();
        assert_eq!(s.registry().types().len(), types, "idempotent");
        assert_eq!(s.resolve("example.org", "foos").unwrap(), foos);
        // Deleting it (no objects) retires the type.
        s.delete(
            crds,
            &ObjKey::new("", "foos.example.org"),
            &DeletePreconditions::default(),
            false,
        )
        .unwrap();
        assert!(s.resolve("example.org", "foos").is_err());
        assert!(s.rt(foos).is_err());
    }
}
