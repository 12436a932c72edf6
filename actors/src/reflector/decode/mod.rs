//! Decoding list pages and watch lines straight from their bytes.
//!
//! - [`page`]: a list page keeps only its `metadata` and `items`.
//! - [`watch_line`]: a watch line's `{type, object}` envelope, decoded
//!   tag first into `K`, a bookmark or a `Status`.
//! - [`PageDecoder`] and [`LineDecoder`]: the same through simd-json's tape
//!   (`tape`), which gives every `Vec` its exact capacity.
//! - [`DecodeOptions::skip_managed_fields`]: `metadata.managedFields` is
//!   skipped by the parser (`managed_fields`), never allocated.

mod key;
pub mod line_decoder;
mod managed_fields;
mod object;
pub mod page;
pub mod page_decoder;
mod tape;
#[cfg(test)]
mod testdata;
pub mod watch_line;

pub use line_decoder::LineDecoder;
pub use object::decode_object;
pub use page::{Page, decode_page, peek_continue};
pub use page_decoder::{MAX_TAPE_BODY, PageDecoder, PageError};
pub use watch_line::{WatchLine, bare_status, decode_watch_line, skippable_watch_line};

/// How objects are decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Skip `metadata.managedFields` while parsing (it stays `None`). Off by default.
    pub skip_managed_fields: bool,
}

/// Checks UTF-8 once for the whole input: much cheaper than the check per
/// string that decoding from bytes does.
fn utf8(bytes: &[u8]) -> Result<&str, serde_json::Error> {
    std::str::from_utf8(bytes).map_err(|e| serde::de::Error::custom(format!("invalid UTF-8: {e}")))
}
