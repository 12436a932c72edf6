//! What a watch stream yields, once decoded: the vocabulary shared by the
//! decoders, the list/watch sources and the Reflector loop.

/// The annotation that marks the end of a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// One event of a watch stream, decoded.
#[derive(Debug)]
pub enum SourceEvent<K> {
    /// `ADDED`.
    Added(K),
    /// `MODIFIED`.
    Modified(K),
    /// `DELETED`, with the final state.
    Deleted(K),
    /// `BOOKMARK`: only a resourceVersion; `initial_events_end`.
    Bookmark {
        /// The bookmark's resourceVersion.
        resource_version: String,
        /// True when annotated `k8s.io/initial-events-end: "true"` exactly.
        initial_events_end: bool,
    },
}
