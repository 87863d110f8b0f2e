//! Offline stand-ins for the API server's CRD checks.
//!
//! `kubectl apply --dry-run=client` needs an API server, which these tests
//! cannot have. Instead they check objects and schemas with two small
//! validators that implement the part of the API server's behaviour the
//! FlexInfer schemas use.
//!
//! [`validate`] checks a value against an `openAPIV3Schema` node:
//!
//! - `type` (`object`, `array`, `string`, `integer`, `number`, `boolean`);
//!   `integer` accepts only whole numbers;
//! - `properties` and `required`; a property the schema does not declare is
//!   an error (what `kubectl apply --validate=strict` reports; the API
//!   server would silently prune it) unless the node has
//!   `x-kubernetes-preserve-unknown-fields: true`, whose subtree is then
//!   accepted as is;
//! - `additionalProperties` (map values) and `items`;
//! - `enum`, `minimum`, `maximum`, `minLength`, `maxLength`, `minItems`,
//!   `maxItems`;
//! - `pattern`, for the anchored literal prefixes with optional characters
//!   (`^https?://`) the schemas use; any other pattern is reported as
//!   unsupported so that a new one cannot pass unchecked;
//! - `format`: `int32` range and RFC 3339 `date-time`;
//! - `x-kubernetes-int-or-string`: an integer or a string;
//! - at the root, `apiVersion`, `kind` and `metadata` are skipped (the
//!   server validates them itself).
//!
//! Not evaluated: CEL rules (`x-kubernetes-validations`) and list-map key
//! uniqueness. Defaulting is not applied; objects are validated as written.
//!
//! [`structural_problems`] checks the rules the API server enforces on a
//! CRD schema before accepting it: every node that describes a value has a
//! `type` (except int-or-string and preserve-unknown-fields nodes), no
//! `$ref`/`definitions`/`$schema`, no `anyOf`/`oneOf`/`allOf`/`not`, no
//! `nullable`, no node with both `properties` and `additionalProperties`,
//! `required` names exist, `enum` values match the type, `default`s are
//! valid against their node, and `x-kubernetes-list-type: map` lists have
//! object items that require their map keys.

#![allow(dead_code)]

use serde_json::Value;

/// Every JSONSchemaProps keyword a generated schema may use.
const KNOWN_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "description",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "enum",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
];

/// Errors of `value` against `schema`, each prefixed with its JSON path.
pub fn validate(schema: &Value, value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    check(schema, value, "", true, &mut errors);
    errors
}

fn check(schema: &Value, value: &Value, path: &str, root: bool, errors: &mut Vec<String>) {
    let here = if path.is_empty() { "<root>" } else { path };
    let Some(node) = schema.as_object() else {
        errors.push(format!("{here}: schema node is not an object"));
        return;
    };
    let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if int_or_string {
        if !(value.is_string() || is_integer(value)) {
            errors.push(format!(
                "{here}: expected integer or string, got {}",
                kind(value)
            ));
        }
    } else if let Some(ty) = node.get("type").and_then(Value::as_str) {
        let ok = match ty {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => is_integer(value),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            other => {
                errors.push(format!("{here}: unsupported type {other:?}"));
                return;
            }
        };
        if !ok {
            errors.push(format!("{here}: expected {ty}, got {}", kind(value)));
            return;
        }
    }

    if let Some(allowed) = node.get("enum").and_then(Value::as_array) {
        if !allowed.iter().any(|candidate| same_value(candidate, value)) {
            errors.push(format!(
                "{here}: {value} is not one of {}",
                Value::Array(allowed.clone())
            ));
        }
    }
    if let Some(number) = value.as_f64() {
        if let Some(min) = node.get("minimum").and_then(Value::as_f64) {
            if number < min {
                errors.push(format!("{here}: {value} is less than the minimum {min}"));
            }
        }
        if let Some(max) = node.get("maximum").and_then(Value::as_f64) {
            if number > max {
                errors.push(format!("{here}: {value} is greater than the maximum {max}"));
            }
        }
        if node.get("format").and_then(Value::as_str) == Some("int32")
            && i32::try_from(value.as_i64().unwrap_or(i64::MAX)).is_err()
        {
            errors.push(format!("{here}: {value} does not fit int32"));
        }
    }
    if let Some(text) = value.as_str() {
        let chars = text.chars().count() as u64;
        if let Some(min) = node.get("minLength").and_then(Value::as_u64) {
            if chars < min {
                errors.push(format!("{here}: string shorter than {min}"));
            }
        }
        if let Some(max) = node.get("maxLength").and_then(Value::as_u64) {
            if chars > max {
                errors.push(format!("{here}: string longer than {max}"));
            }
        }
        if let Some(pattern) = node.get("pattern").and_then(Value::as_str) {
            match matches_pattern(pattern, text) {
                Some(true) => {}
                Some(false) => errors.push(format!("{here}: {text:?} does not match {pattern:?}")),
                None => errors.push(format!(
                    "{here}: pattern {pattern:?} is not supported by the test validator"
                )),
            }
        }
        if node.get("format").and_then(Value::as_str) == Some("date-time")
            && text.parse::<k8s_openapi::jiff::Timestamp>().is_err()
        {
            errors.push(format!("{here}: {text:?} is not an RFC 3339 date-time"));
        }
    }

    if let Some(items) = value.as_array() {
        if let Some(min) = node.get("minItems").and_then(Value::as_u64) {
            if (items.len() as u64) < min {
                errors.push(format!("{here}: fewer than {min} items"));
            }
        }
        if let Some(max) = node.get("maxItems").and_then(Value::as_u64) {
            if (items.len() as u64) > max {
                errors.push(format!("{here}: more than {max} items"));
            }
        }
        if let Some(item_schema) = node.get("items") {
            for (index, item) in items.iter().enumerate() {
                check(
                    item_schema,
                    item,
                    &format!("{path}[{index}]"),
                    false,
                    errors,
                );
            }
        }
    }

    if let Some(object) = value.as_object() {
        let preserve = node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        for name in node
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = name.as_str().unwrap_or_default();
            if !object.contains_key(name) {
                errors.push(format!("{here}: missing required field {name:?}"));
            }
        }
        let properties = node.get("properties").and_then(Value::as_object);
        let additional = node.get("additionalProperties");
        for (key, child) in object {
            let child_path = format!("{path}.{key}");
            if root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(child_schema) = properties.and_then(|p| p.get(key)) {
                check(child_schema, child, &child_path, false, errors);
            } else if let Some(child_schema) = additional.filter(|a| a.is_object()) {
                check(child_schema, child, &child_path, false, errors);
            } else if !preserve {
                errors.push(format!("{child_path}: unknown field"));
            }
        }
    }
}

/// Problems that would make the API server reject the schema.
pub fn structural_problems(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    structural(schema, "", &mut problems);
    problems
}

fn structural(node: &Value, path: &str, problems: &mut Vec<String>) {
    let here = if path.is_empty() { "<root>" } else { path };
    let Some(map) = node.as_object() else {
        problems.push(format!("{here}: schema node is not an object"));
        return;
    };
    for key in map.keys() {
        if !KNOWN_KEYWORDS.contains(&key.as_str()) {
            problems.push(format!("{here}: keyword {key:?} is not allowed"));
        }
    }
    let int_or_string = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if let Some(value) = map.get("x-kubernetes-preserve-unknown-fields") {
        if value != &Value::Bool(true) {
            problems.push(format!(
                "{here}: x-kubernetes-preserve-unknown-fields must be true when set"
            ));
        }
    }
    let ty = map.get("type").and_then(Value::as_str);
    if int_or_string {
        if ty.is_some() {
            problems.push(format!(
                "{here}: int-or-string node must not declare a type"
            ));
        }
    } else if ty.is_none() && !preserve {
        problems.push(format!("{here}: missing type"));
    }
    if map.contains_key("properties") && map.contains_key("additionalProperties") {
        problems.push(format!("{here}: both properties and additionalProperties"));
    }
    if (map.contains_key("properties") || map.contains_key("additionalProperties"))
        && ty != Some("object")
    {
        problems.push(format!("{here}: properties on a non-object node"));
    }
    if map.contains_key("items") != (ty == Some("array")) {
        problems.push(format!("{here}: items and type array must come together"));
    }
    if let Some(required) = map.get("required").and_then(Value::as_array) {
        let properties = map.get("properties").and_then(Value::as_object);
        for name in required {
            let name = name.as_str().unwrap_or_default();
            if !properties.is_some_and(|p| p.contains_key(name)) {
                problems.push(format!("{here}: required field {name:?} is not a property"));
            }
        }
    }
    if let Some(values) = map.get("enum").and_then(Value::as_array) {
        let mut scratch = map.clone();
        scratch.remove("enum");
        let element_schema = Value::Object(scratch);
        for value in values {
            for error in validate(&element_schema, value) {
                problems.push(format!("{here}: enum value {value}: {error}"));
            }
        }
    }
    if let Some(default) = map.get("default") {
        let mut scratch = map.clone();
        scratch.remove("default");
        for error in validate(&Value::Object(scratch), default) {
            problems.push(format!("{here}: default {default}: {error}"));
        }
    }
    if map.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
        let keys: Vec<&str> = map
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if keys.is_empty() {
            problems.push(format!("{here}: list-type map without list-map-keys"));
        }
        let item_required: Vec<&str> = map
            .get("items")
            .and_then(|items| items.get("required"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for key in keys {
            if !item_required.contains(&key) {
                problems.push(format!(
                    "{here}: list-map key {key:?} is not required in the items"
                ));
            }
        }
    }

    if let Some(properties) = map.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            structural(child, &format!("{path}.{name}"), problems);
        }
    }
    if let Some(child) = map.get("additionalProperties") {
        if child.is_object() {
            structural(child, &format!("{path}.*"), problems);
        } else if child != &Value::Bool(true) {
            problems.push(format!("{here}: additionalProperties must be a schema"));
        }
    }
    if let Some(child) = map.get("items") {
        structural(child, &format!("{path}[]"), problems);
    }
}

/// Matches the pattern dialect the schemas use: `^` followed by literal
/// characters, each optionally followed by `?`. `None` for anything else.
fn matches_pattern(pattern: &str, text: &str) -> Option<bool> {
    let body = pattern.strip_prefix('^')?;
    let chars: Vec<char> = body.chars().collect();
    if chars.iter().any(|c| "\\.[](){}*+|$".contains(*c)) {
        return None;
    }
    let mut tokens: Vec<(char, bool)> = Vec::new();
    for c in chars {
        if c == '?' {
            tokens.last_mut()?.1 = true;
        } else {
            tokens.push((c, false));
        }
    }
    Some(prefix_match(&tokens, &text.chars().collect::<Vec<_>>()))
}

fn prefix_match(tokens: &[(char, bool)], text: &[char]) -> bool {
    match tokens.split_first() {
        None => true,
        Some((&(c, optional), rest)) => {
            let here = text.first() == Some(&c) && prefix_match(rest, &text[1..]);
            here || (optional && prefix_match(rest, text))
        }
    }
}

fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[test]
fn pattern_dialect() {
    assert_eq!(matches_pattern("^https?://", "https://x"), Some(true));
    assert_eq!(matches_pattern("^https?://", "http://x"), Some(true));
    assert_eq!(matches_pattern("^https?://", "ftp://x"), Some(false));
    assert_eq!(matches_pattern("^https://", "http://x"), Some(false));
    assert_eq!(matches_pattern("^[a-z]+$", "abc"), None);
    assert_eq!(matches_pattern("abc", "abc"), None);
}
