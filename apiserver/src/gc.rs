//! The ownerReferences garbage collector (`ServerConfig::garbage_collection`), a small
//! version of kube-controller-manager's: after writes it deletes dependents whose owners are
//! all gone, drops references to owners that are gone while others remain, and finishes
//! `Orphan` and `Foreground` deletes.
//!
//! Differences from the real collector: it works on the store directly (no informers, so no
//! delay beyond a task wake-up); an owner is identified by apiVersion's group, kind, name and
//! uid (the version is not checked); an owner whose kind is not served counts as present (the
//! real collector retries those too); dependents of a foreground delete are deleted with
//! `Foreground` when they have dependents themselves, else `Background`, and the owner waits
//! for those with `blockOwnerDeletion: true` (the real one also waits for a dependent that
//! was created while the owner was being deleted, which this one does too, as a plain
//! dependent); a namespaced dependent cannot name a cluster-scoped owner in another way than
//! by name (the real one reports invalid references as events).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::delete::{DeleteOptions, DeletePreconditions, Propagation};
use crate::key::ObjKey;
use crate::object;
use crate::status::{ApiError, Reason};
use crate::store::Store;
use crate::write::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER, WriteOptions};

/// The manager of the collector's writes (the real collector runs in kube-controller-manager).
const MANAGER: &str = "kube-controller-manager";

/// Passes one collection runs at most (each pass acts on what the previous one left).
const MAX_PASSES: usize = 64;

/// One thing the collector does.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    /// Delete a dependent whose owners are all gone, or whose owner is deleted in foreground.
    Delete {
        res: usize,
        key: ObjKey,
        uid: String,
        policy: Propagation,
    },
    /// Remove references to these owner uids (gone, or orphaning their dependents).
    DropOwners {
        res: usize,
        key: ObjKey,
        uid: String,
        owners: Vec<String>,
    },
    /// An owner's orphan or foreground deletion is done.
    RemoveFinalizer {
        res: usize,
        key: ObjKey,
        uid: String,
        finalizer: &'static str,
    },
}

/// Start the collector on the current tokio runtime; it ends when the store is dropped.
pub fn spawn(store: &Arc<Store>) {
    let weak = Arc::downgrade(store);
    let wake = store.gc_wake.clone();
    tokio::spawn(async move {
        loop {
            wake.notified().await;
            let Some(store) = weak.upgrade() else {
                return;
            };
            collect(&store);
        }
    });
}

/// Run the collector until nothing is left to do (at most `MAX_PASSES` passes);
/// returns how many actions it took.
pub fn collect(store: &Store) -> usize {
    let mut taken = 0;
    for _ in 0..MAX_PASSES {
        let actions = plan(store);
        if actions.is_empty() {
            break;
        }
        let mut progressed = false;
        for a in actions {
            match apply(store, &a) {
                Ok(()) => {
                    taken += 1;
                    progressed = true;
                }
                Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => {}
                Err(e) => tracing::warn!(error = %e, action = ?a, "garbage collection step failed"),
            }
        }
        if !progressed {
            break;
        }
    }
    taken
}

/// The group of an owner reference's `apiVersion` (`apps/v1` → `apps`, `v1` → core).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

fn plan(store: &Store) -> Vec<Action> {
    let inner = store.inner.lock();
    let reg = store.registry();
    // Owner uid → (dependents, blocking dependents), over every stored dependent.
    let mut refs: HashMap<&str, (usize, usize)> = HashMap::new();
    for (res, key) in &inner.owned {
        if let Some(rec) = inner.objects.get(*res).and_then(|m| m.get(key)) {
            for o in &rec.owners {
                let e = refs.entry(o.uid.as_str()).or_default();
                e.0 += 1;
                if o.block_owner_deletion {
                    e.1 += 1;
                }
            }
        }
    }
    let mut actions = Vec::new();
    for (res, key) in &inner.owned {
        let Some(rec) = inner.objects.get(*res).and_then(|m| m.get(key)) else {
            continue;
        };
        let deleting = rec.parsed().is_ok_and(|v| object::deletion_requested(&v));
        // As the real collector sorts owners: solid (present, not waiting for its
        // dependents), waiting (a foreground delete), gone (absent, or another uid).
        // Owners being orphan-deleted are solid, and their references are dropped.
        let mut gone = Vec::new();
        let mut waiting = Vec::new();
        let mut solid = 0;
        for o in &rec.owners {
            let Some((ores, ort)) = reg.by_kind(group_of(&o.api_version), &o.kind) else {
                solid += 1;
                continue;
            };
            let okey = if ort.namespaced {
                ObjKey::new(&key.namespace, &o.name)
            } else {
                ObjKey::new("", &o.name)
            };
            match inner.objects.get(ores).and_then(|m| m.get(&okey)) {
                Some(owner) if owner.uid == o.uid => {
                    let fins = owner
                        .parsed()
                        .ok()
                        .filter(object::deletion_requested)
                        .map(|ov| {
                            object::finalizers(&ov)
                                .iter()
                                .map(|f| f.to_string())
                                .collect::<Vec<_>>()
                        })
                        .unwrap_or_default();
                    if fins.iter().any(|f| f == FOREGROUND_FINALIZER) {
                        waiting.push(o.uid.clone());
                    } else {
                        solid += 1;
                        if fins.iter().any(|f| f == ORPHAN_FINALIZER) {
                            gone.push(o.uid.clone());
                        }
                    }
                }
                _ => gone.push(o.uid.clone()),
            }
        }
        if solid > 0 {
            gone.extend(waiting);
            if !gone.is_empty() {
                actions.push(Action::DropOwners {
                    res: *res,
                    key: key.clone(),
                    uid: rec.uid.clone(),
                    owners: gone,
                });
            }
        } else if !deleting {
            let policy = if !waiting.is_empty() && refs.contains_key(rec.uid.as_str()) {
                Propagation::Foreground
            } else {
                Propagation::Background
            };
            actions.push(Action::Delete {
                res: *res,
                key: key.clone(),
                uid: rec.uid.clone(),
                policy,
            });
        }
    }
    for (res, key) in &inner.gc_owners {
        let Some(rec) = inner.objects.get(*res).and_then(|m| m.get(key)) else {
            continue;
        };
        let Ok(v) = rec.parsed() else { continue };
        if !object::deletion_requested(&v) {
            continue;
        }
        let (dependents, blocking) = refs.get(rec.uid.as_str()).copied().unwrap_or_default();
        let fins = object::finalizers(&v);
        let done = [
            (ORPHAN_FINALIZER, dependents == 0),
            (FOREGROUND_FINALIZER, blocking == 0),
        ];
        for (finalizer, finished) in done {
            if finished && fins.contains(&finalizer) {
                actions.push(Action::RemoveFinalizer {
                    res: *res,
                    key: key.clone(),
                    uid: rec.uid.clone(),
                    finalizer,
                });
            }
        }
    }
    actions
}

fn same_uid(v: &Value, uid: &str) -> Result<(), ApiError> {
    if v.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid) {
        Ok(())
    } else {
        Err(ApiError::new(Reason::Conflict, "the object was replaced"))
    }
}

fn apply(store: &Store, action: &Action) -> Result<(), ApiError> {
    let opts = WriteOptions {
        manager: Some(MANAGER.to_string()),
        ..Default::default()
    };
    match action {
        Action::Delete {
            res,
            key,
            uid,
            policy,
        } => {
            let del = DeleteOptions {
                preconditions: DeletePreconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                },
                propagation: Some(*policy),
                ..Default::default()
            };
            store.delete_with(*res, key, &del).map(|_| ())
        }
        Action::DropOwners {
            res,
            key,
            uid,
            owners,
        } => store
            .modify_with(*res, key, &opts, |mut v| {
                same_uid(&v, uid)?;
                if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                    if let Some(list) = meta
                        .get_mut("ownerReferences")
                        .and_then(Value::as_array_mut)
                    {
                        list.retain(|r| {
                            !r.get("uid")
                                .and_then(Value::as_str)
                                .is_some_and(|u| owners.iter().any(|o| o == u))
                        });
                    }
                    if meta
                        .get("ownerReferences")
                        .and_then(Value::as_array)
                        .is_some_and(Vec::is_empty)
                    {
                        meta.remove("ownerReferences");
                    }
                }
                Ok(v)
            })
            .map(|_| ()),
        Action::RemoveFinalizer {
            res,
            key,
            uid,
            finalizer,
        } => store
            .modify_with(*res, key, &opts, |mut v| {
                same_uid(&v, uid)?;
                object::remove_finalizer(&mut v, finalizer);
                Ok(v)
            })
            .map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use crate::resource::ResourceType;
    use crate::store::StoreOptions;
    use serde_json::json;

    fn store() -> Store {
        Store::with_options(
            Registry::new(ResourceType::defaults()),
            1000,
            100,
            StoreOptions {
                managed_fields: false,
                garbage_collection: true,
                ..StoreOptions::default()
            },
        )
    }

    fn owned_by(name: &str, owner: &Value, block: bool) -> Value {
        json!({"metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "blockOwnerDeletion": block
        }]}})
    }

    fn create(s: &Store, res: usize, body: Value) -> Value {
        s.create(res, Some("ns"), body, false).unwrap().to_value()
    }

    #[test]
    fn background_orphan_and_foreground() {
        let s = store();
        let cms = s.resolve("", "configmaps").unwrap();
        let count = |s: &Store| s.object_count(cms);
        let owner = create(&s, cms, json!({"metadata": {"name": "owner"}}));
        s.create(cms, Some("ns"), owned_by("dep", &owner, false), false)
            .unwrap();
        assert_eq!(collect(&s), 0, "nothing to do while the owner lives");
        // Background: the owner goes, then its dependent.
        let key = |n: &str| ObjKey::new("ns", n);
        s.delete_with(cms, &key("owner"), &DeleteOptions::default())
            .unwrap();
        assert_eq!(count(&s), 1);
        assert_eq!(collect(&s), 1);
        assert_eq!(count(&s), 0);

        // Orphan: the dependent stays without its reference, then the owner goes.
        let owner = create(&s, cms, json!({"metadata": {"name": "owner"}}));
        s.create(cms, Some("ns"), owned_by("kept", &owner, false), false)
            .unwrap();
        let orphan = DeleteOptions {
            propagation: Some(Propagation::Orphan),
            ..Default::default()
        };
        let d = s.delete_with(cms, &key("owner"), &orphan).unwrap();
        assert!(!d.deleted, "held by the orphan finalizer");
        collect(&s);
        assert!(s.get(cms, &key("owner")).is_err());
        let kept = s.get(cms, &key("kept")).unwrap().to_value();
        assert!(kept["metadata"].get("ownerReferences").is_none(), "{kept}");

        // Foreground: the owner waits for its blocking dependent.
        let owner = create(&s, cms, json!({"metadata": {"name": "owner"}}));
        let mut held = owned_by("held", &owner, true);
        held["metadata"]["finalizers"] = json!(["example.com/hold"]);
        s.create(cms, Some("ns"), held, false).unwrap();
        let fg = DeleteOptions {
            propagation: Some(Propagation::Foreground),
            ..Default::default()
        };
        s.delete_with(cms, &key("owner"), &fg).unwrap();
        collect(&s);
        let o = s.get(cms, &key("owner")).unwrap().to_value();
        assert_eq!(object::finalizers(&o), [FOREGROUND_FINALIZER]);
        let h = s.get(cms, &key("held")).unwrap().to_value();
        assert!(
            object::deletion_requested(&h),
            "the dependent is being deleted"
        );
        // The dependent's finalizer goes: it is deleted, and then the owner.
        s.modify(cms, &key("held"), false, |mut v| {
            object::remove_finalizer(&mut v, "example.com/hold");
            Ok(v)
        })
        .unwrap();
        collect(&s);
        assert!(s.get(cms, &key("owner")).is_err());
        assert_eq!(count(&s), 1, "only `kept` is left");
    }

    #[test]
    fn an_owner_with_another_uid_is_gone_and_partial_references_are_dropped() {
        let s = store();
        let cms = s.resolve("", "configmaps").unwrap();
        let a = create(&s, cms, json!({"metadata": {"name": "a"}}));
        let mut stale = a.clone();
        stale["metadata"]["uid"] = json!("not-a");
        let mut dep = owned_by("dep", &a, false);
        let gone = owned_by("x", &stale, false)["metadata"]["ownerReferences"][0].clone();
        dep["metadata"]["ownerReferences"]
            .as_array_mut()
            .unwrap()
            .push(gone);
        s.create(cms, Some("ns"), dep, false).unwrap();
        let lone = owned_by("lone", &stale, false);
        s.create(cms, Some("ns"), lone, false).unwrap();
        collect(&s);
        assert!(s.get(cms, &ObjKey::new("ns", "lone")).is_err());
        let d = s.get(cms, &ObjKey::new("ns", "dep")).unwrap().to_value();
        assert_eq!(
            d["metadata"]["ownerReferences"].as_array().unwrap().len(),
            1
        );
    }
}
