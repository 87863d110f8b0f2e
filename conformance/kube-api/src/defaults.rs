//! Server-side defaulting and normalisation of built-in kinds that
//! clients observe: Namespace phase, Service cluster IP and port defaults,
//! Secret `stringData`, Pod phase.
//!
//! This is a small subset of upstream defaulting; everything else is stored
//! as sent.

use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::registry::ResourceType;

/// Applies defaults to `obj`, being created (`old` absent) or replacing
/// `old`.
pub(crate) fn apply(
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
    cluster_ip: &dyn Fn() -> String,
) {
    if !rt.group.is_empty() || rt.custom {
        return;
    }
    let creating = old.is_none();
    match rt.plural.as_str() {
        "namespaces" if creating => {
            let o = ensure_object(obj);
            let status = o.entry("status").or_insert_with(|| json!({}));
            if status.get("phase").is_none() {
                if let Some(s) = status.as_object_mut() {
                    s.insert("phase".into(), json!("Active"));
                }
            }
        }
        "pods" if creating => {
            let o = ensure_object(obj);
            let status = o.entry("status").or_insert_with(|| json!({}));
            if status.get("phase").is_none() {
                if let Some(s) = status.as_object_mut() {
                    s.insert("phase".into(), json!("Pending"));
                }
            }
        }
        "services" => service(obj, old, cluster_ip),
        "secrets" => secret(obj),
        _ => {}
    }
}

fn ensure_object(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    obj.as_object_mut().expect("object ensured above")
}

fn service(obj: &mut Value, old: Option<&Value>, cluster_ip: &dyn Fn() -> String) {
    let o = ensure_object(obj);
    let spec = o.entry("spec").or_insert_with(|| json!({}));
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    if spec.get("type").is_none() {
        spec.insert("type".into(), json!("ClusterIP"));
    }
    if spec.get("clusterIP").is_none() {
        // The cluster IP is immutable: keep the allocated one on updates.
        match old
            .and_then(|o| o.get("spec"))
            .and_then(|s| s.get("clusterIP"))
        {
            Some(ip) => {
                let ips = old
                    .and_then(|o| o.pointer("/spec/clusterIPs"))
                    .cloned()
                    .unwrap_or_else(|| json!([ip]));
                spec.insert("clusterIP".into(), ip.clone());
                spec.insert("clusterIPs".into(), ips);
            }
            None => {
                let ip = cluster_ip();
                spec.insert("clusterIP".into(), json!(ip));
                spec.insert("clusterIPs".into(), json!([ip]));
            }
        }
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            if p.get("protocol").is_none() {
                p.insert("protocol".into(), json!("TCP"));
            }
            if p.get("targetPort").is_none() {
                if let Some(port) = p.get("port").cloned() {
                    p.insert("targetPort".into(), port);
                }
            }
        }
    }
}

fn secret(obj: &mut Value) {
    let o = ensure_object(obj);
    let Some(Value::Object(string_data)) = o.remove("stringData") else {
        return;
    };
    let data = o.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in string_data {
            let text = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            data.insert(
                k,
                json!(base64::engine::general_purpose::STANDARD.encode(text)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_string_data_moves_to_data() {
        let rt = ResourceType::builtin("", "v1", "Secret", "secrets", true, false);
        let mut s = json!({"stringData": {"k": "v"}});
        apply(&rt, &mut s, None, &|| "10.96.0.1".into());
        assert_eq!(s, json!({"data": {"k": "dg=="}}));
    }

    #[test]
    fn services_get_an_ip_and_port_defaults() {
        let rt = ResourceType::builtin("", "v1", "Service", "services", true, true);
        let mut s = json!({"spec": {"ports": [{"port": 80}]}});
        apply(&rt, &mut s, None, &|| "10.96.0.7".into());
        assert_eq!(s["spec"]["clusterIP"], "10.96.0.7");
        let old = s.clone();
        let mut replaced = json!({"spec": {"ports": [{"port": 81}]}});
        apply(&rt, &mut replaced, Some(&old), &|| "10.96.0.8".into());
        assert_eq!(replaced["spec"]["clusterIP"], "10.96.0.7");
        assert_eq!(s["spec"]["type"], "ClusterIP");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        assert_eq!(s["spec"]["ports"][0]["protocol"], "TCP");
    }
}
