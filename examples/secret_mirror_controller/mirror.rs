//! The secret mirror: for every Secret labelled `kinformer.example/mirror=true`,
//! a ConfigMap `<name>-mirror` in its namespace, owned by it (a controller
//! ownerReference, so a real cluster's garbage collector deletes it with the
//! Secret), listing the Secret's type and key names. Never its values: the
//! mirror says what a Secret holds without exposing it, and nothing here
//! logs Secret data.
//!
//! Shared by the example and `tests/controller.rs`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kinformer::controller::{Action, Controller, ControllerHandle, Request};
use kinformer::{Informer, Store};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};

/// Which Secrets are mirrored.
pub const SECRET_SELECTOR: &str = "kinformer.example/mirror=true";
/// The label every mirror carries (the ConfigMap informer selects it).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "secret-mirror");
/// The ConfigMap informer's selector.
pub const MIRROR_SELECTOR: &str = "app.kubernetes.io/managed-by=secret-mirror";
/// The field manager of the server-side applies.
const FIELD_MANAGER: &str = "secret-mirror";

/// The mirror of Secret `name`.
pub fn mirror_name(secret: &str) -> String {
    format!("{secret}-mirror")
}

/// The ConfigMap derived from `secret`: its type and sorted key names.
pub fn mirror_of(secret: &Secret) -> ConfigMap {
    let mut keys: Vec<&str> = secret
        .data
        .iter()
        .flat_map(|d| d.keys())
        .chain(secret.string_data.iter().flat_map(|d| d.keys()))
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let owner = OwnerReference {
        api_version: Secret::api_version(&()).into_owned(),
        kind: Secret::kind(&()).into_owned(),
        name: secret.name_any(),
        uid: secret.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(mirror_name(&secret.name_any())),
            namespace: secret.namespace(),
            labels: Some(BTreeMap::from([(MANAGED_BY.0.into(), MANAGED_BY.1.into())])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            (
                "type".into(),
                secret.type_.clone().unwrap_or_else(|| "Opaque".into()),
            ),
            ("keys".into(), keys.join(",")),
        ])),
        ..ConfigMap::default()
    }
}

/// True when `current` already is what `desired` asks for.
fn in_sync(current: &ConfigMap, desired: &ConfigMap) -> bool {
    current.data == desired.data
        && current.metadata.owner_references == desired.metadata.owner_references
        && current.labels().get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1)
}

/// Brings the mirror of `req`'s Secret in line: applied when it differs from
/// the cached one (`mirrors`), deleted once the Secret is gone (or no longer
/// labelled). Idempotent: a reconcile of a key in sync writes nothing.
pub async fn reconcile(
    req: Request<Secret>,
    client: Client,
    mirrors: Store<ConfigMap>,
) -> Result<Action, kube::Error> {
    let namespace = req.key.namespace().unwrap_or("default");
    let name = mirror_name(req.key.name());
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let cached = mirrors
        .snapshot()
        .get(format!("{namespace}/{name}").as_str());
    match &req.object {
        Some(secret) => {
            let desired = mirror_of(secret);
            if cached.is_some_and(|c| in_sync(&c, &desired)) {
                return Ok(Action::Done);
            }
            let params = PatchParams::apply(FIELD_MANAGER).force();
            api.patch(&name, &params, &Patch::Apply(&desired)).await?;
        }
        // Not cached: nothing to delete (were it created meanwhile, its
        // event would bring this key back).
        None if cached.is_none() => {}
        None => match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(e) => return Err(e),
        },
    }
    Ok(Action::Done)
}

/// Starts the secret mirror in `namespace`.
pub async fn start(client: Client, namespace: &str) -> anyhow::Result<ControllerHandle<Secret>> {
    let secrets = Informer::builder(Api::<Secret>::namespaced(client.clone(), namespace))
        .label_selector(SECRET_SELECTOR)
        .skip_managed_fields(true)
        .start()?;
    let mirrors = Informer::builder(Api::<ConfigMap>::namespaced(client.clone(), namespace))
        .label_selector(MIRROR_SELECTOR)
        .skip_managed_fields(true)
        .start()?;
    let store = mirrors.store();
    let controller = Controller::new(secrets)
        .owns(mirrors)
        .name("secret-mirror")
        .reconcile_timeout(Duration::from_secs(30))
        .start(move |req: Request<Secret>| reconcile(req, client.clone(), store.clone()))
        .await?;
    controller.wait_for_sync(Duration::from_secs(60)).await?;
    Ok(controller)
}
