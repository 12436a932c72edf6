//! `Accept` negotiation: which representation a request gets. Clients name the one they
//! want with media type parameters (`application/json;as=Table;g=meta.k8s.io;v=v1`) and
//! list fallbacks after it; an entry without `as=` is the object itself (JSON here, whatever
//! the media type). A header whose every entry asks for something unsupported gets 406.

use crate::discovery::AggregatedVersion;
use crate::status::{ApiError, Reason};

/// What a resource request answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// The objects themselves.
    Object,
    /// kubectl's `meta.k8s.io/v1 Table`.
    Table,
    /// `PartialObjectMetadata` (gets, watch events) or `PartialObjectMetadataList` (lists).
    Metadata,
}

/// What a discovery request on `/api` or `/apis` answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryForm {
    /// `APIVersions` / `APIGroupList` (1.24).
    Legacy,
    /// `APIGroupDiscoveryList` (1.26+).
    Aggregated(AggregatedVersion),
}

struct MediaRange<'a> {
    r#as: Option<&'a str>,
    group: Option<&'a str>,
    version: Option<&'a str>,
}

fn ranges(accept: &str) -> Vec<MediaRange<'_>> {
    accept
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| {
            let mut m = MediaRange {
                r#as: None,
                group: None,
                version: None,
            };
            for p in r.split(';').skip(1) {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                let v = v.trim().trim_matches('"');
                match k.trim() {
                    "as" => m.r#as = Some(v),
                    "g" => m.group = Some(v),
                    "v" => m.version = Some(v),
                    _ => {}
                }
            }
            m
        })
        .collect()
}

fn not_acceptable(metadata: bool) -> ApiError {
    let accepted = if metadata {
        "application/json, application/json;as=Table;g=meta.k8s.io;v=v1, application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
    } else {
        "application/json, application/json;as=Table;g=meta.k8s.io;v=v1"
    };
    ApiError::new(
        Reason::NotAcceptable,
        format!("only the following media types are accepted: {accepted}"),
    )
}

/// The representation of a resource request; `list` for collection GETs;
/// `metadata`: whether `PartialObjectMetadata(List)` is served (a test can
/// turn it off, `Faults::refuse_metadata`).
pub fn representation(
    accept: Option<&str>,
    list: bool,
    metadata: bool,
) -> Result<Representation, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Representation::Object);
    };
    let meta_v = |m: &MediaRange<'_>| {
        m.group.is_none_or(|g| g == "meta.k8s.io")
            && m.version.is_none_or(|v| v == "v1" || v == "v1beta1")
    };
    for m in ranges(accept) {
        match m.r#as {
            None => return Ok(Representation::Object),
            Some("Table") if meta_v(&m) => return Ok(Representation::Table),
            Some("PartialObjectMetadataList") if metadata && list && meta_v(&m) => {
                return Ok(Representation::Metadata);
            }
            Some("PartialObjectMetadata") if metadata && !list && meta_v(&m) => {
                return Ok(Representation::Metadata);
            }
            Some(_) => {}
        }
    }
    Err(not_acceptable(metadata))
}

/// The form of `/api` or `/apis`: aggregated when the client asks for it first and the
/// server offers it.
pub fn discovery(accept: Option<&str>, aggregated: bool) -> DiscoveryForm {
    let Some(accept) = accept else {
        return DiscoveryForm::Legacy;
    };
    for m in ranges(accept) {
        match (m.r#as, m.group, m.version) {
            (None, _, _) => return DiscoveryForm::Legacy,
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some(v)) if aggregated => {
                match v {
                    "v2" => return DiscoveryForm::Aggregated(AggregatedVersion::V2),
                    "v2beta1" => return DiscoveryForm::Aggregated(AggregatedVersion::V2Beta1),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    DiscoveryForm::Legacy
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBE_AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

    #[test]
    fn resource_representations() {
        assert_eq!(
            representation(None, true, true).unwrap(),
            Representation::Object
        );
        assert_eq!(
            representation(Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"), true, true).unwrap(),
            Representation::Table
        );
        let list_meta = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        let meta = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        assert_eq!(
            representation(Some(list_meta), true, true).unwrap(),
            Representation::Metadata
        );
        assert_eq!(
            representation(Some(meta), false, true).unwrap(),
            Representation::Metadata
        );
        assert_eq!(
            representation(Some(meta), true, true).unwrap_err().code,
            406
        );
        assert_eq!(
            representation(Some(list_meta), false, true)
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(
            representation(
                Some("application/json;as=Other;g=example.com;v=v1"),
                false,
                true
            )
            .unwrap_err()
            .code,
            406
        );
        assert_eq!(
            representation(Some("application/json;as=Other;g=x;v=v1, */*"), false, true).unwrap(),
            Representation::Object
        );
        assert_eq!(
            representation(Some("application/vnd.kubernetes.protobuf"), false, true).unwrap(),
            Representation::Object
        );
        // A server without metadata-only representations refuses them (406),
        // names only what it serves, and still honours a fallback.
        let refused = representation(Some(list_meta), true, false).unwrap_err();
        assert_eq!(refused.code, 406);
        assert!(
            !refused.message.contains("PartialObjectMetadata"),
            "{}",
            refused.message
        );
        assert_eq!(
            representation(Some(meta), false, false).unwrap_err().code,
            406
        );
        assert_eq!(
            representation(Some(&format!("{list_meta},application/json")), true, false).unwrap(),
            Representation::Object
        );
    }

    #[test]
    fn discovery_forms() {
        assert_eq!(
            discovery(Some(KUBE_AGGREGATED), true),
            DiscoveryForm::Aggregated(AggregatedVersion::V2)
        );
        assert_eq!(
            discovery(Some(KUBE_AGGREGATED), false),
            DiscoveryForm::Legacy
        );
        assert_eq!(
            discovery(
                Some(
                    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
                ),
                true
            ),
            DiscoveryForm::Aggregated(AggregatedVersion::V2Beta1)
        );
        assert_eq!(
            discovery(Some("application/json"), true),
            DiscoveryForm::Legacy
        );
        assert_eq!(discovery(None, true), DiscoveryForm::Legacy);
    }
}
