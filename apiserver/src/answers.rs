//! How the HTTP layer answers a resource request: the form objects are written in (the
//! version asked for, metadata only, Tables), what a DELETE answers per kind, and the
//! write options a request carries (field manager, version, subresource).

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::delete::DeleteOptions;
use crate::encode::{META_API_VERSION, ObjectForm};
use crate::managed_fields::manager_name;
use crate::negotiate::Representation;
use crate::object::ObjectRecord;
use crate::resource::ResourceType;
use crate::status::ApiError;
use crate::table;
use crate::write::{Deletion, Subresource, WriteOptions};

/// The version segment of a resource path (`/api/{v}/...`, `/apis/{g}/{v}/...`).
pub fn path_version(path: &str) -> Option<&str> {
    let mut segs = path.trim_matches('/').split('/').filter(|s| !s.is_empty());
    match segs.next()? {
        "api" => segs.next(),
        "apis" => segs.nth(1),
        _ => None,
    }
}

/// One query parameter of a raw query string.
pub fn query_param(raw: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(raw.unwrap_or("").as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// What a resource request is about, for writing its answer.
#[derive(Debug, Clone)]
pub struct Answering<'a> {
    /// The type.
    pub rt: &'a ResourceType,
    /// The version the path names.
    pub version: &'a str,
    /// The negotiated representation.
    pub representation: Representation,
}

impl Answering<'_> {
    /// The `apiVersion` of the request.
    pub fn api_version(&self) -> String {
        self.rt.api_version_of(self.version)
    }

    /// How one object is written (gets, writes, watch events).
    pub fn object_form(&self) -> ObjectForm {
        match self.representation {
            Representation::Metadata => ObjectForm::Metadata,
            _ => ObjectForm::at_version(&self.rt.kind, &self.rt.api_version(), &self.api_version()),
        }
    }

    /// How list items are written: built-in types' items carry no `apiVersion`/`kind`.
    pub fn item_form(&self) -> ObjectForm {
        match self.representation {
            Representation::Metadata => ObjectForm::Metadata,
            _ if self.rt.list_items_typed() => self.object_form(),
            _ => ObjectForm::NoTypeMeta,
        }
    }

    /// `kind` and `apiVersion` of a list answer.
    pub fn list_type(&self) -> (String, String) {
        match self.representation {
            Representation::Metadata => {
                ("PartialObjectMetadataList".into(), META_API_VERSION.into())
            }
            _ => (self.rt.list_kind(), self.api_version()),
        }
    }

    /// `kind` and `apiVersion` of watch BOOKMARK objects.
    pub fn bookmark_type(&self) -> (String, String) {
        match self.representation {
            Representation::Metadata => ("PartialObjectMetadata".into(), META_API_VERSION.into()),
            _ => (self.rt.kind.clone(), self.api_version()),
        }
    }

    /// An object answer.
    pub fn object(&self, code: StatusCode, rec: &ObjectRecord) -> Response {
        if self.representation == Representation::Table {
            return json_answer(code, &table::object_table(self.rt, rec));
        }
        bytes_answer(code, self.object_form().bytes(rec))
    }

    /// The answer to a DELETE, as the real server's registry for the kind gives it: a
    /// `Status` (`Success`, details name/group/kind/uid) when the object is gone and the
    /// kind does not return deleted objects, the object otherwise (also whenever finalizers
    /// or a grace period hold the delete). 202 only for `orphanDependents: false` on a
    /// delete that did not complete, as the real handler does.
    pub fn deletion(&self, d: &Deletion, opts: &DeleteOptions) -> Response {
        let code = if !d.deleted && opts.orphan_dependents == Some(false) {
            StatusCode::ACCEPTED
        } else {
            StatusCode::OK
        };
        if d.deleted && !self.rt.returns_deleted_object {
            let mut details =
                json!({"name": &*d.record.key.name, "kind": self.rt.plural, "uid": d.record.uid});
            if !self.rt.group.is_empty() {
                details["group"] = json!(self.rt.group);
            }
            return json_answer(
                code,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
            );
        }
        self.object(code, &d.record)
    }
}

/// A JSON answer.
pub fn json_answer(code: StatusCode, value: &Value) -> Response {
    bytes_answer(code, Bytes::from(value.to_string()))
}

/// A JSON answer from bytes.
pub fn bytes_answer(code: StatusCode, bytes: Bytes) -> Response {
    (
        code,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        Body::from(bytes),
    )
        .into_response()
}

/// The write options of a request: manager from `fieldManager` or the User-Agent, the
/// version of the path, the subresource.
pub fn write_options(
    headers: &HeaderMap,
    raw_query: Option<&str>,
    version: &str,
    subresource: Option<Subresource>,
    dry_run: bool,
) -> WriteOptions {
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let fm = query_param(raw_query, "fieldManager");
    WriteOptions {
        dry_run,
        version: Some(version.to_string()),
        manager: Some(manager_name(fm.as_deref(), ua)),
        subresource,
        applied: None,
    }
}

/// 422 for an apply without `fieldManager`, as the real server answers.
pub fn apply_needs_manager(raw_query: Option<&str>) -> Result<(), ApiError> {
    match query_param(raw_query, "fieldManager") {
        Some(m) if !m.is_empty() => Ok(()),
        _ => Err(ApiError::invalid(
            "PatchOptions.meta.k8s.io",
            "",
            "fieldManager",
            "FieldValueRequired",
            "Required value: is required for apply patch",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_params_from_the_request() {
        assert_eq!(path_version("/api/v1/namespaces/a/pods"), Some("v1"));
        assert_eq!(path_version("/apis/apps/v1/deployments"), Some("v1"));
        assert_eq!(path_version("/apis/apps"), None);
        assert_eq!(
            query_param(Some("a=1&fieldManager=kubectl-edit"), "fieldManager").as_deref(),
            Some("kubectl-edit")
        );
        assert!(apply_needs_manager(Some("force=true")).is_err());
        assert!(apply_needs_manager(Some("fieldManager=me")).is_ok());
    }
}
