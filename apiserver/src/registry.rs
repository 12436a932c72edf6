//! The index of served resource types. Built-in types are registered at start; a
//! CustomResourceDefinition adds a type while it exists and retires it when deleted.
//!
//! A type's index is its identity for the store (object maps, watchers, history events):
//! indexes are never reused, so a request that resolved a type just before its CRD went
//! away finds it retired (404) rather than someone else's objects.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::resource::{ResourceType, version_priority};

/// Served resource types by index and by (group, plural).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Every type ever registered, by index; retired ones stay (not served).
    types: Vec<Arc<ResourceType>>,
    /// `served[i]`: whether `types[i]` is served now.
    served: Vec<bool>,
    /// The served types by (group, plural). Invariant: every value `i` has `served[i]`.
    by_key: BTreeMap<(String, String), usize>,
}

/// A type could not be registered: its (group, plural) is served by another type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameConflict {
    /// The index serving the name.
    pub existing: usize,
}

impl Registry {
    /// Build the registry; later duplicates of the same (group, plural) are ignored.
    pub fn new(types: Vec<ResourceType>) -> Self {
        let mut reg = Registry::default();
        for t in types {
            let _ = reg.add(t);
        }
        reg
    }

    /// All types ever registered, by index (retired ones included).
    pub fn types(&self) -> &[Arc<ResourceType>] {
        &self.types
    }

    /// The type at `res` if it is served.
    pub fn served_type(&self, res: usize) -> Option<&Arc<ResourceType>> {
        self.types.get(res).filter(|_| self.is_served(res))
    }

    /// Whether the type at `res` is served.
    pub fn is_served(&self, res: usize) -> bool {
        self.served.get(res).copied().unwrap_or(false)
    }

    /// Served types with their indexes, in registration order.
    pub fn served(&self) -> impl Iterator<Item = (usize, &ResourceType)> {
        self.types
            .iter()
            .enumerate()
            .filter(|(i, _)| self.is_served(*i))
            .map(|(i, t)| (i, t.as_ref()))
    }

    /// Look a served type up by group and plural.
    pub fn get(&self, group: &str, plural: &str) -> Option<(usize, &ResourceType)> {
        let idx = *self.by_key.get(&(group.to_string(), plural.to_string()))?;
        self.types.get(idx).map(|t| (idx, t.as_ref()))
    }

    /// Look a type up by group, version and plural (the path form).
    pub fn get_versioned(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<(usize, &ResourceType)> {
        self.get(group, plural)
            .filter(|(_, t)| t.serves_version(version))
    }

    /// Look a served type up by group and kind (owner references name kinds).
    pub fn by_kind(&self, group: &str, kind: &str) -> Option<(usize, &ResourceType)> {
        self.served()
            .find(|(_, t)| t.group == group && t.kind == kind)
    }

    /// Whether a group/version pair is served.
    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.served()
            .any(|(_, t)| t.group == group && t.serves_version(version))
    }

    /// Served groups (core excluded) with their versions, preferred first, in first-seen order.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for (_, t) in self.served().filter(|(_, t)| !t.group.is_empty()) {
            let versions = match out.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, versions)) => versions,
                None => {
                    out.push((t.group.clone(), Vec::new()));
                    match out.last_mut() {
                        Some((_, versions)) => versions,
                        None => continue,
                    }
                }
            };
            for v in &t.versions {
                if !versions.contains(v) {
                    versions.push(v.clone());
                }
            }
        }
        for (_, versions) in &mut out {
            versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }

    /// Register a type; its index, or the index already serving its (group, plural).
    pub fn add(&mut self, t: ResourceType) -> Result<usize, NameConflict> {
        let key = (t.group.clone(), t.plural.clone());
        if let Some(existing) = self.by_key.get(&key) {
            return Err(NameConflict {
                existing: *existing,
            });
        }
        let idx = self.types.len();
        self.by_key.insert(key, idx);
        self.types.push(Arc::new(t));
        self.served.push(true);
        Ok(idx)
    }

    /// Replace a served type's definition (a CRD update: versions, short names, schemas).
    /// Group and plural stay (a CRD's names cannot change them).
    pub fn replace(&mut self, res: usize, t: ResourceType) {
        if self.is_served(res)
            && let Some(slot) = self.types.get_mut(res)
            && slot.group == t.group
            && slot.plural == t.plural
        {
            *slot = Arc::new(t);
        }
    }

    /// Stop serving a type (its CRD is gone). Its index is never reused.
    pub fn retire(&mut self, res: usize) {
        if let Some(s) = self.served.get_mut(res) {
            *s = false;
        }
        self.by_key.retain(|_, i| *i != res);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_register_retire_and_keep_their_index() {
        let mut r = Registry::new(ResourceType::defaults());
        let n = r.types().len();
        let gadgets = ResourceType::new("example.com", "v1", "Gadget", "gadgets", true);
        let idx = r.add(gadgets.clone()).unwrap();
        assert_eq!(idx, n);
        assert_eq!(r.add(gadgets.clone()), Err(NameConflict { existing: idx }));
        assert_eq!(r.get("example.com", "gadgets").unwrap().0, idx);
        r.retire(idx);
        assert!(r.get("example.com", "gadgets").is_none());
        assert!(r.served_type(idx).is_none());
        assert_eq!(
            r.add(gadgets).unwrap(),
            n + 1,
            "a new index, never the retired one"
        );
        assert!(r.get_versioned("", "v1", "configmaps").is_some());
        assert!(r.get_versioned("", "v2", "configmaps").is_none());
        assert_eq!(
            r.by_kind("apps", "Deployment").unwrap().1.plural,
            "deployments"
        );
    }

    #[test]
    fn group_versions_are_sorted_by_kube_priority() {
        let mut r = Registry::default();
        let mut t = ResourceType::new("example.org", "v1beta1", "Foo", "foos", true);
        t.versions = vec!["v1beta1".into(), "v1".into(), "v2alpha1".into()];
        r.add(t).unwrap();
        assert_eq!(
            r.groups(),
            vec![(
                "example.org".to_string(),
                vec!["v1".to_string(), "v1beta1".into(), "v2alpha1".into()]
            )]
        );
    }
}
