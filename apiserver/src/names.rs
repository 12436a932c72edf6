//! Name rules of the real server: object names (RFC 1123 subdomains), namespaces
//! (RFC 1123 labels), label keys and values. Pure string checks.

/// Whether `name` is a lowercase RFC 1123 subdomain (what most kinds require).
pub fn valid_object_name(name: &str) -> bool {
    name.len() <= 253
        && !name.is_empty()
        && name.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Whether `name` is a lowercase RFC 1123 label (namespaces, CRD plurals): a subdomain without dots, at most 63 bytes.
pub fn valid_dns_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && valid_object_name(name)
}

/// The name part of a label key, or a label value: alphanumerics, `-`, `_`, `.`, at most 63 bytes.
fn valid_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Whether `key` is a valid label key (`[prefix/]name`; the prefix is a DNS subdomain).
pub fn valid_label_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => valid_object_name(prefix) && valid_name_part(name),
        None => valid_name_part(key),
    }
}

/// Whether `value` is a valid label value (empty allowed).
pub fn valid_label_value(value: &str) -> bool {
    value.is_empty() || valid_name_part(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_labels_and_keys() {
        assert!(valid_object_name("a.b-c"));
        assert!(!valid_object_name("A"));
        assert!(!valid_object_name("-a"));
        assert!(valid_dns_label("widgets"));
        assert!(!valid_dns_label("a.b"));
        assert!(valid_label_key("example.com/app_x"));
        assert!(!valid_label_key("Bad Prefix/x"));
        assert!(valid_label_value(""));
        assert!(!valid_label_value("b c"));
    }
}
