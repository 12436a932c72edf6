//! The hasher of the queue's maps.

/// The maps of the queue hash every key on every add: foldhash, as the
/// DeltaFIFO (keys come from the API server; still randomly seeded per map).
pub(super) type Hasher = foldhash::fast::RandomState;
