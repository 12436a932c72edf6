//! In-process operations of a [`ServerHandle`] beyond plain CRUD: CustomResourceDefinitions,
//! status writes, deletes with `DeleteOptions`, and running the garbage collector now.

use serde_json::Value;

use crate::crd::{CRD_GROUP, CRD_PLURAL};
use crate::delete::DeleteOptions;
use crate::handle::ServerHandle;
use crate::status::ApiError;
use crate::write::{Subresource, WriteOptions};

/// What an in-process delete did.
#[derive(Debug, Clone, PartialEq)]
pub struct Deleted {
    /// The object's final state, or the object marked with `deletionTimestamp` when
    /// finalizers (or a Pod's grace period) hold the delete.
    pub object: Value,
    /// Whether the object is gone.
    pub gone: bool,
}

impl ServerHandle {
    /// Create a CustomResourceDefinition (`apiextensions.k8s.io/v1`). When it returns, the
    /// type is served and discovered (its status says `Established`), unless its names
    /// conflict with a served type (`NamesAccepted: False`).
    pub fn create_crd(&self, crd: Value) -> Result<Value, ApiError> {
        self.create(CRD_GROUP, CRD_PLURAL, None, crd)
    }

    /// Delete a CustomResourceDefinition: its objects are deleted, then it stops being served
    /// (at once when none of them has finalizers).
    pub fn delete_crd(&self, name: &str) -> Result<Deleted, ApiError> {
        self.delete_with_options(CRD_GROUP, CRD_PLURAL, None, name, &DeleteOptions::default())
    }

    /// Delete with `DeleteOptions` (preconditions, `propagationPolicy`, `gracePeriodSeconds`).
    pub fn delete_with_options(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let store = self.store();
        let res = self.res(group, plural)?;
        let key = self.key(res, namespace, name);
        let d = store.delete_with(res, &key, options)?;
        // A CRD's delete completes after the answer is decided (once its objects are gone).
        let gone = d.deleted || store.get(res, &key).is_err_and(|e| e.code == 404);
        Ok(Deleted {
            object: d.record.to_value(),
            gone,
        })
    }

    /// Write an object's `status` through the `status` subresource (only `status` changes;
    /// a `metadata.resourceVersion` in `object` must match).
    pub fn update_status(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, ApiError> {
        let store = self.store();
        let res = self.res(group, plural)?;
        let rt = store.rt(res)?;
        if !rt.status.has_endpoint() {
            return Err(ApiError::new(
                crate::status::Reason::NotFound,
                "the server could not find the requested resource",
            ));
        }
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_string);
        let opts = WriteOptions {
            subresource: Some(Subresource::Status),
            ..Default::default()
        };
        Ok(store
            .update_with(res, namespace, name.as_deref(), object, &opts)?
            .to_value())
    }

    /// Run the garbage collector until it has nothing left to do (it also runs by itself
    /// after writes when `ServerConfig::garbage_collection` is on); returns the actions taken.
    pub fn collect_garbage(&self) -> usize {
        crate::gc::collect(self.store())
    }
}
