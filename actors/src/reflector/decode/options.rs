//! How objects are decoded.

/// How objects are decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Skip `metadata.managedFields` while parsing (it stays `None`). Off by default.
    pub skip_managed_fields: bool,
}
