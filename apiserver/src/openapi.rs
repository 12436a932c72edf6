//! The minimal `/openapi/v3` documents kubectl reads to learn that server-side field
//! validation is supported (so it skips client-side schema validation).

use serde_json::{Value, json};

use crate::registry::Registry;

/// `GET /openapi/v3`: one entry per served group/version.
pub fn root(reg: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs: Vec<(String, String)> = Vec::new();
    for (_, t) in reg.served() {
        for v in &t.versions {
            let gv = (t.group.clone(), v.clone());
            if !gvs.contains(&gv) {
                gvs.push(gv);
            }
        }
    }
    for (g, v) in gvs {
        let path = if g.is_empty() {
            format!("api/{v}")
        } else {
            format!("apis/{g}/{v}")
        };
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash=kinformer")}),
        );
    }
    json!({"paths": paths})
}

/// `GET /openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`: PATCH operations carry
/// the GVK extension and the `fieldValidation` parameter.
pub fn group_version_doc(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    if !reg.has_group_version(group, version) {
        return None;
    }
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = serde_json::Map::new();
    for (_, t) in reg
        .served()
        .filter(|(_, t)| t.group == group && t.serves_version(version))
    {
        let path = if t.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{prefix}/{}/{{name}}", t.plural)
        };
        let gvk = json!({"group": t.group, "version": version, "kind": t.kind});
        let params = json!([
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
        ]);
        let op = |id: &str| {
            json!({
                "operationId": format!("{id}{}", t.kind),
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
            })
        };
        paths.insert(
            path,
            json!({"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0-kinformer"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
