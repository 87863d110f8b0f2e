//! Markdown reference of the CustomResourceDefinitions, rendered from the
//! same manifests the chart ships (`flexinfer_crds::manifests`).

use serde_json::Value;

use crate::markdown::{cell, code, table};

/// The whole CRD reference document.
pub fn render_all() -> String {
    let mut out = String::from(
        "# CRD reference\n\n\
         Generated from the Rust types in `crds/` (the same schemas as the manifests under \
         `helm/flexinfer/crds/`). Every custom resource is in the API group `ai.flexinfer`. \
         A field path ending in `[]` is a list item; `{}` is any key of a map.\n\n\
         Other projects define resources named `models` and `clusters` (and other plurals \
         below) too; where two are installed, `kubectl get models` picks one of them. Name \
         FlexInfer's unambiguously by the fully qualified name (`kubectl get \
         models.ai.flexinfer`, `kubectl get clusters.ai.flexinfer`) or a short name \
         (`kubectl get fimodel`, `kubectl get ficl`). Every kind is in the category \
         `flexinfer`: `kubectl get flexinfer -A` lists every FlexInfer object.\n\n",
    );
    let crds: Vec<Value> = flexinfer_crds::manifests::render_all()
        .iter()
        .map(|(name, yaml)| {
            serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{name} is not YAML: {e}"))
        })
        .collect();
    out.push_str(
        "| Kind | Version | Fully qualified name | Short names | Categories | Scope |\n\
         |---|---|---|---|---|---|\n",
    );
    for crd in &crds {
        let names = &crd["spec"]["names"];
        let short: Vec<String> = names["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(code)
            .collect();
        let categories: Vec<String> = names["categories"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(code)
            .collect();
        out.push_str(&format!(
            "| [{kind}](#{anchor}) | {versions} | `{plural}.{group}` | {short} | {categories} | {scope} |\n",
            kind = str_of(&names["kind"]),
            anchor = str_of(&names["kind"]).to_lowercase(),
            versions = versions(crd).join(", "),
            plural = str_of(&names["plural"]),
            group = str_of(&crd["spec"]["group"]),
            short = short.join(", "),
            categories = categories.join(", "),
            scope = str_of(&crd["spec"]["scope"]),
        ));
    }
    out.push('\n');
    for crd in &crds {
        out.push_str(&render(crd));
    }
    out
}

fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

fn versions(crd: &Value) -> Vec<String> {
    crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| code(str_of(&v["name"])))
        .collect()
}

/// The section of one CRD: names, printer columns and a field table per
/// served version.
pub fn render(crd: &Value) -> String {
    let names = &crd["spec"]["names"];
    let kind = str_of(&names["kind"]);
    let group = str_of(&crd["spec"]["group"]);
    let mut out = format!("## {kind}\n\n");
    for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
        let name = str_of(&version["name"]);
        let schema = &version["schema"]["openAPIV3Schema"];
        out.push_str(&format!("`apiVersion: {group}/{name}`, `kind: {kind}`"));
        if version["deprecated"] == Value::Bool(true) {
            out.push_str(" (deprecated)");
        }
        out.push_str("\n\n");
        if let Some(description) = schema["description"].as_str() {
            out.push_str(description.trim());
            out.push_str("\n\n");
        }
        let columns: Vec<Vec<String>> = version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|column| {
                vec![
                    cell(str_of(&column["name"])),
                    code(str_of(&column["jsonPath"])),
                ]
            })
            .collect();
        if !columns.is_empty() {
            out.push_str("`kubectl get` columns:\n\n");
            out.push_str(&table(&["Column", "JSON path"], &columns));
            out.push('\n');
        }
        let mut rows = Vec::new();
        for root in ["spec", "status"] {
            let node = &schema["properties"][root];
            if node.is_object() {
                let required = is_required(schema, root);
                fields(root, node, required, &mut rows);
            }
        }
        out.push_str(&table(&["Field", "Type", "Default", "Description"], &rows));
        out.push('\n');
    }
    out
}

fn is_required(parent: &Value, name: &str) -> bool {
    parent["required"]
        .as_array()
        .is_some_and(|required| required.iter().any(|r| r == name))
}

/// Appends the row of `node` at `path`, then the rows of its children.
fn fields(path: &str, node: &Value, required: bool, rows: &mut Vec<Vec<String>>) {
    rows.push(vec![
        code(path),
        type_of(node),
        node.get("default").map(default_of).unwrap_or_default(),
        description_of(node, required),
    ]);
    if let Some(properties) = node["properties"].as_object() {
        for (name, child) in properties {
            fields(
                &format!("{path}.{name}"),
                child,
                is_required(node, name),
                rows,
            );
        }
    }
    if node["items"].is_object() && has_children(&node["items"]) {
        fields(&format!("{path}[]"), &node["items"], false, rows);
    }
    if node["additionalProperties"].is_object() && has_children(&node["additionalProperties"]) {
        fields(
            &format!("{path}.{{}}"),
            &node["additionalProperties"],
            false,
            rows,
        );
    }
}

fn has_children(node: &Value) -> bool {
    node["properties"].is_object() || node["items"].is_object()
}

fn type_of(node: &Value) -> String {
    if node["x-kubernetes-int-or-string"] == Value::Bool(true) {
        return "int or string".to_owned();
    }
    let base = str_of(&node["type"]);
    let text = match base {
        "array" => {
            let item = type_of(&node["items"]);
            format!("[]{item}")
        }
        "object" if node["additionalProperties"].is_object() => {
            format!("map[string]{}", type_of(&node["additionalProperties"]))
        }
        "" if node["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) => "any".to_owned(),
        other => other.to_owned(),
    };
    match node["format"].as_str() {
        Some(format) if base != "array" => format!("{text} ({format})"),
        _ => text,
    }
}

fn default_of(value: &Value) -> String {
    match value {
        Value::String(text) => code(text),
        other => code(&other.to_string()),
    }
}

fn description_of(node: &Value, required: bool) -> String {
    let mut parts = Vec::new();
    if required {
        parts.push("**Required.**".to_owned());
    }
    if let Some(text) = node["description"].as_str() {
        parts.push(cell(text));
    }
    if let Some(values) = node["enum"].as_array() {
        let values: Vec<String> = values
            .iter()
            .map(|v| {
                code(
                    v.as_str()
                        .map_or_else(|| v.to_string(), str::to_owned)
                        .as_str(),
                )
            })
            .collect();
        parts.push(format!("One of: {}.", values.join(", ")));
    }
    let bound = |key: &str| node.get(key).map(|v| v.to_string());
    match (bound("minimum"), bound("maximum")) {
        (Some(min), Some(max)) => parts.push(format!("Range {min} to {max}.")),
        (Some(min), None) => parts.push(format!("At least {min}.")),
        (None, Some(max)) => parts.push(format!("At most {max}.")),
        (None, None) => {}
    }
    if let Some(pattern) = node["pattern"].as_str() {
        parts.push(format!("Pattern {}.", code(pattern)));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_flattened_with_types_defaults_and_constraints() {
        let crd = json!({
            "spec": {
                "group": "ai.flexinfer",
                "names": {"kind": "Demo", "plural": "demos"},
                "versions": [{
                    "name": "v1",
                    "schema": {"openAPIV3Schema": {
                        "description": "A demo.",
                        "required": ["spec"],
                        "properties": {"spec": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "name": {"type": "string", "description": "Its name."},
                                "replicas": {"type": "integer", "format": "int32",
                                              "default": 1, "minimum": 0},
                                "mode": {"type": "string", "enum": ["a", "b"]},
                                "ports": {"type": "array", "items": {"type": "object",
                                    "properties": {"port": {"type": "integer"}}}},
                                "labels": {"type": "object",
                                           "additionalProperties": {"type": "string"}}
                            }
                        }}
                    }}
                }]
            }
        });
        let text = render(&crd);
        assert!(
            text.contains("`apiVersion: ai.flexinfer/v1`, `kind: Demo`"),
            "{text}"
        );
        assert!(
            text.contains("| `spec` | object |  | **Required.** |"),
            "{text}"
        );
        assert!(
            text.contains("| `spec.name` | string |  | **Required.** Its name. |"),
            "{text}"
        );
        assert!(
            text.contains("| `spec.replicas` | integer (int32) | `1` | At least 0. |"),
            "{text}"
        );
        assert!(
            text.contains("| `spec.mode` | string |  | One of: `a`, `b`. |"),
            "{text}"
        );
        assert!(text.contains("| `spec.ports[]` | object |  |  |"), "{text}");
        assert!(
            text.contains("| `spec.ports[].port` | integer |  |  |"),
            "{text}"
        );
        assert!(
            text.contains("| `spec.labels` | map[string]string |  |  |"),
            "{text}"
        );
    }
}
