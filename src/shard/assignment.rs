//! Which keys one member may reconcile now ([`Assignment`], SH-2..SH-4).

use super::rendezvous::owner;

/// The keys a member may reconcile now: those that every view in `views`
/// assigns to it and that no other live member claims under the view it
/// published. Compared by value, so a new one is published only when it
/// changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    me: String,
    /// The member sets (sorted) under each of which a key must be ours: the
    /// view we published, and while a new one is being published, that one
    /// too (SH-4). Empty: nothing is ours.
    views: Vec<Vec<String>>,
    /// Other live members with the view each published (SH-3): a key one of
    /// them owns under its own view is not taken until it publishes another.
    claims: Vec<(String, Vec<String>)>,
}

impl Assignment {
    /// Nothing is ours (not yet a member, stepped down, stopped).
    pub fn nothing(me: impl Into<String>) -> Self {
        Assignment {
            me: me.into(),
            views: Vec::new(),
            claims: Vec::new(),
        }
    }

    pub(crate) fn new(
        me: &str,
        views: Vec<Vec<String>>,
        claims: Vec<(String, Vec<String>)>,
    ) -> Self {
        Assignment {
            me: me.to_owned(),
            views,
            claims,
        }
    }

    /// The member this assignment is of.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// Whether the key `shard_key` (`namespace/name`, or `name`) is ours now.
    pub fn owns(&self, shard_key: &str) -> bool {
        !self.views.is_empty()
            && self
                .views
                .iter()
                .all(|v| owner(v, shard_key) == Some(self.me.as_str()))
            && self
                .claims
                .iter()
                .all(|(other, view)| owner(view, shard_key) != Some(other.as_str()))
    }

    /// True when no key is ours.
    pub fn is_nothing(&self) -> bool {
        self.views.is_empty()
    }

    pub(crate) fn views(&self) -> &[Vec<String>] {
        &self.views
    }

    pub(crate) fn claims(&self) -> &[(String, Vec<String>)] {
        &self.claims
    }

    /// The members whose claims hold keys back from us.
    pub fn claimants(&self) -> impl Iterator<Item = &str> {
        self.claims.iter().map(|(m, _)| m.as_str())
    }
}
