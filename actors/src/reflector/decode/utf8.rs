//! The one UTF-8 check of a body before it is parsed as text.

/// Checks UTF-8 once for the whole input: much cheaper than the check per
/// string that decoding from bytes does.
pub(super) fn utf8(bytes: &[u8]) -> Result<&str, serde_json::Error> {
    std::str::from_utf8(bytes).map_err(|e| serde::de::Error::custom(format!("invalid UTF-8: {e}")))
}
