//! Objects shared by the decoders' tests.

use k8s_openapi::api::core::v1::Pod;

pub(super) const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns",
    "resourceVersion":"7","labels":{"a":"b"},"managedFields":[{"manager":"kubelet","operation":"Update",
    "fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:phase":{}}}}],"uid":"u"},
    "spec":{"containers":[{"name":"c","image":"i"}]},"status":{"phase":"Running"}}"#;

/// A Pod with arrays of three (serde_json would give them capacity 4),
/// int-or-string ports, quantities, times, escapes and nulls.
pub(super) const RICH_POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"rich","namespace":"ns",
    "resourceVersion":"9","creationTimestamp":"2024-05-01T10:00:00Z","uid":"u",
    "labels":{"app":"w\"e\u00e9b"},"annotations":null,"finalizers":["a","b","c"],
    "managedFields":[{"manager":"m1","operation":"Update","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}},
    {"manager":"m2","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{}},
    {"manager":"m3","operation":"Update","time":"2024-05-01T10:00:01Z","fieldsType":"FieldsV1","fieldsV1":{}}]},
    "spec":{"containers":[
    {"name":"a","image":"i","env":[{"name":"E1","value":"1"},{"name":"E2","value":"2"},{"name":"E3"}],
     "ports":[{"containerPort":8080,"protocol":"TCP"}],"readinessProbe":{"httpGet":{"port":8080,"path":"/"}},
     "resources":{"limits":{"cpu":"500m","memory":"1Gi"}}},
    {"name":"b","image":"i","livenessProbe":{"tcpSocket":{"port":"http"}},"unknownField":[1,{"x":null}]},
    {"name":"c","image":"i","securityContext":{"runAsUser":1000,"privileged":false}}],
    "terminationGracePeriodSeconds":30,"activeDeadlineSeconds":9007199254740993},
    "status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#;

pub(super) fn page_of(items: &[&str]) -> Vec<u8> {
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"42","continue":"c1"}},"items":[{}]}}"#,
        items.join(",")
    )
    .into_bytes()
}

pub(super) fn containers_capacity(pod: &Pod) -> usize {
    pod.spec
        .as_ref()
        .map_or(0, |spec| spec.containers.capacity())
}

pub(super) fn watch_line(event: &str, object: &str) -> Vec<u8> {
    format!(r#"{{"type":"{event}","object":{object}}}"#).into_bytes()
}
