//! Decoding list pages and watch lines straight from their bytes.
//!
//! - [`page`]: a list page keeps only its `metadata` and `items`.
//! - [`watch_line`]: a watch line's `{type, object}` envelope, decoded
//!   tag first into `K`, a bookmark or a `Status`.
//! - [`PageDecoder`], [`LineDecoder`] and [`ObjectDecoder`] (one object, a
//!   snapshot's): the same through simd-json's tape (`tape`), which gives
//!   every `Vec` its exact capacity.
//! - [`DecodeOptions::skip_managed_fields`]: `metadata.managedFields` is
//!   skipped by the parser (`managed_fields`), never allocated.

mod key;
pub mod line_decoder;
mod managed_fields;
mod object;
mod options;
pub mod page;
pub mod page_decoder;
#[cfg(test)]
mod partial_metadata;
mod tape;
#[cfg(test)]
mod testdata;
mod utf8;
pub mod watch_line;

pub use line_decoder::LineDecoder;
pub use object::{ObjectDecoder, decode_object};
pub use options::DecodeOptions;
pub use page::{Page, decode_page, peek_continue};
pub use page_decoder::{MAX_TAPE_BODY, PageDecoder, PageError};
pub use watch_line::{WatchLine, bare_status, decode_watch_line, skippable_watch_line};
