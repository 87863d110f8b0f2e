//! What a chart scenario needs of the cluster it runs on, so that each
//! scenario is written once and runs on both lanes: the in-memory API
//! server ([`Lane`](super::lane::Lane)) and the real control plane
//! (`real_cluster::lane::RealLane`).

#![allow(async_fn_in_trait)]

use std::path::Path;
use std::time::Duration;

use flexinfer_testkube::sim::KubeletPod;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

use super::lane::{eventually, fresh_client, MODEL_LABEL};

/// An installed release of the chart, its gateway running as a process,
/// and a kubelet that runs model pods as `flexinfer-sim` processes.
pub trait Cluster {
    /// Namespace the release is installed in (and watches).
    fn namespace(&self) -> &str;
    /// `http://<gateway>/<path>` on its proxy port.
    fn gateway_url(&self, path: &str) -> String;
    /// Folder of the logs, for failure messages.
    fn logs(&self) -> &Path;
    /// Sets the `flexinfer-sim` flags of the pods of Model `model`.
    fn sim_flags(&self, model: &str, flags: &[&str]);
    /// A client with every permission (the test's own, not a component's).
    fn client(&self) -> kube::Client;
    /// The pods the kubelet runs now.
    fn pods(&self) -> Vec<KubeletPod>;
    /// SIGTERM to the gateway, as the kubelet sends on pod deletion; whether
    /// it exited within `limit`.
    async fn terminate_gateway(&mut self, limit: Duration) -> bool;
    /// Starts the gateway again (a new pod of its Deployment) and waits
    /// until it is ready.
    async fn start_gateway(&mut self);

    /// A v1alpha2 Model of the release namespace.
    fn model(&self, name: &str, spec: Value) -> Value {
        json!({
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "Model",
            "metadata": {"name": name, "namespace": self.namespace()},
            "spec": spec,
        })
    }

    /// Server-side applies `obj` as `kubectl apply --server-side` would;
    /// a Model, then waits until the gateway lists it (its watch has seen
    /// it), as a user would check `/v1/models` before the first request.
    async fn apply(&self, obj: Value) {
        let name = obj["metadata"]["name"].as_str().expect("name").to_string();
        let is_model = obj["kind"] == "Model";
        api_for(self.client(), self.namespace(), &obj)
            .patch(
                &name,
                &PatchParams::apply("kubectl").force(),
                &Patch::Apply(obj),
            )
            .await
            .unwrap_or_else(|e| panic!("apply {name}: {e}"));
        if !is_model {
            return;
        }
        let url = self.gateway_url("/v1/models");
        eventually(
            "the gateway to list the model",
            Duration::from_secs(15),
            || {
                let (url, name) = (url.clone(), name.clone());
                async move {
                    let list: Value = fresh_client()
                        .get(&url)
                        .send()
                        .await
                        .ok()?
                        .json()
                        .await
                        .ok()?;
                    let listed = list["data"]
                        .as_array()?
                        .iter()
                        .any(|m| m["id"] == name.as_str());
                    listed.then_some(())
                }
            },
        )
        .await;
    }

    /// Deletes `obj` (kind, apiVersion and name are read from it).
    async fn delete(&self, obj: &Value) {
        let name = obj["metadata"]["name"].as_str().expect("name");
        api_for(self.client(), self.namespace(), obj)
            .delete(name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("delete {name}: {e}"));
    }

    /// The stored object of the release namespace, if any.
    async fn object(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        let stub = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}});
        let found = api_for(self.client(), self.namespace(), &stub)
            .get_opt(name)
            .await
            .ok()??;
        serde_json::to_value(found).ok()
    }

    /// `spec.replicas` of Deployment `name`, if it exists.
    async fn replicas(&self, name: &str) -> Option<i64> {
        self.object("apps/v1", "Deployment", name)
            .await?
            .pointer("/spec/replicas")?
            .as_i64()
    }

    /// The stored Pods of Model `model`.
    async fn model_pods(&self, model: &str) -> Vec<Value> {
        let pods: Api<Pod> = Api::namespaced(self.client(), self.namespace());
        let params = ListParams::default().labels(&format!("{MODEL_LABEL}={model}"));
        match pods.list(&params).await {
            Ok(list) => list
                .items
                .iter()
                .filter_map(|p| serde_json::to_value(p).ok())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The kubelet's pods of Model `model` (named `<model>-<suffix>`) as
    /// (pod name, pid of the running process).
    fn model_processes(&self, model: &str) -> Vec<(String, Option<u32>)> {
        self.pods()
            .into_iter()
            .filter(|p| p.name.starts_with(&format!("{model}-")))
            .map(|p| (p.name, p.pid))
            .collect()
    }

    /// Model `model`'s status, its Deployment's replicas and status, and its
    /// pods' phases, for failure messages.
    async fn describe(&self, model: &str) -> String {
        let m = self.object("ai.flexinfer/v1alpha2", "Model", model).await;
        let d = self.object("apps/v1", "Deployment", model).await;
        let pods: Vec<Value> = self
            .model_pods(model)
            .await
            .iter()
            .map(|p| {
                json!([
                    p["metadata"]["name"],
                    p["status"]["phase"],
                    p["status"]["podIP"]
                ])
            })
            .collect();
        format!(
            "Model status {}; Deployment replicas {} status {}; pods {pods:?}; logs in {}",
            m.map_or(Value::Null, |m| m["status"].clone()),
            d.as_ref()
                .map_or(Value::Null, |d| d["spec"]["replicas"].clone()),
            d.map_or(Value::Null, |d| d["status"].clone()),
            self.logs().display()
        )
    }

    /// POSTs a chat completion for `model` through the gateway.
    async fn chat(&self, model: &str) -> reqwest::Response {
        fresh_client()
            .post(self.gateway_url("/v1/chat/completions"))
            .json(&crate::support::chat(model))
            .send()
            .await
            .expect("chat request")
    }
}

/// The API of `obj`'s kind in `namespace` (plural: the kind lowercased
/// with an `s`, which holds for every kind the scenarios touch).
pub fn api_for(client: kube::Client, namespace: &str, obj: &Value) -> Api<DynamicObject> {
    let api_version = obj["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = obj["kind"].as_str().expect("kind");
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let plural = format!("{}s", kind.to_lowercase());
    let ar = ApiResource::from_gvk_with_plural(&gvk, &plural);
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or(namespace);
    Api::namespaced_with(client, ns, &ar)
}
