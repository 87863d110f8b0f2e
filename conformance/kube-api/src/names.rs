//! Object names as kube-apiserver validates them: most kinds take a DNS-1123
//! subdomain, Services a DNS-1035 label, Namespaces a DNS-1123 label, RBAC
//! objects any path segment (`system:controller:...`).

use crate::registry::ResourceType;

const SUBDOMAIN_MAX: usize = 253;
const LABEL_MAX: usize = 63;

fn label_chars(s: &str, first_letter: bool) -> bool {
    let b = s.as_bytes();
    let edge_ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.iter().all(|&c| edge_ok(c) || c == b'-')
        && edge_ok(b[0])
        && edge_ok(b[b.len() - 1])
        && (!first_letter || b[0].is_ascii_lowercase())
}

/// Whether `s` is a DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63).
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= LABEL_MAX && label_chars(s, false)
}

/// Whether `s` is a DNS-1035 label (a DNS-1123 label starting with a letter).
pub fn is_dns1035_label(s: &str) -> bool {
    s.len() <= LABEL_MAX && label_chars(s, true)
}

/// Whether `s` is a DNS-1123 subdomain (dot-separated DNS-1123 labels, at
/// most 253 in all).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= SUBDOMAIN_MAX && s.split('.').all(|part| label_chars(part, false))
}

/// The reason `name` is not a valid name for an object of `rt`, in
/// kube-apiserver's words (`metadata.name: Invalid value: ...`).
pub fn invalid_name(rt: &ResourceType, name: &str) -> Option<String> {
    let why = if rt.group == "rbac.authorization.k8s.io" {
        if name.contains('/') || name.contains('%') || name == "." || name == ".." {
            "may not contain '/' or '%'".to_owned()
        } else {
            return None;
        }
    } else if rt.group.is_empty() && rt.kind == "Service" {
        if is_dns1035_label(name) {
            return None;
        }
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start \
         with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  \
         or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
            .to_owned()
    } else if rt.group.is_empty() && rt.kind == "Namespace" {
        if is_dns1123_label(name) {
            return None;
        }
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
         and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
         regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            .to_owned()
    } else {
        if is_dns1123_subdomain(name) {
            return None;
        }
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
         '-' or '.', and must start and end with an alphanumeric character (e.g. \
         'example.com', regex used for validation is \
         '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            .to_owned()
    };
    Some(format!("metadata.name: Invalid value: \"{name}\": {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        assert!(is_dns1123_subdomain("llama-3.1-8b"));
        assert!(!is_dns1123_subdomain("Not_Valid"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain("-a"));
        assert!(is_dns1123_label("7b-chat"));
        assert!(!is_dns1123_label("llama-3.1-8b"));
        assert!(!is_dns1035_label("7b-chat"));
        assert!(is_dns1035_label("qwen2-5-7b"));
        assert!(!is_dns1035_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain(&"a".repeat(253)));
    }
}
