use flexinfer_crds::v1alpha2::{Model, ModelSpec};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use flexinfer_testkube::{TestApiServer, Verb};

use crate::{api_status, config_map};

fn cm_config(data: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": data})
}

#[tokio::test]
async fn merge_strategic_and_json_patches() {
    let server = TestApiServer::start().await;
    let client = server.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(
        &PostParams::default(),
        &config_map("c", &[("a", "1"), ("b", "2")]),
    )
    .await
    .unwrap();
    let pp = PatchParams::default();
    let merged = cms
        .patch(
            "c",
            &pp,
            &Patch::Merge(json!({"data": {"a": null, "c": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        merged.data.unwrap(),
        [
            ("b".to_string(), "2".to_string()),
            ("c".to_string(), "3".to_string())
        ]
        .into()
    );

    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/b", "value": "2"},
        {"op": "replace", "path": "/data/b", "value": "20"}
    ]))
    .unwrap();
    let patched = cms.patch("c", &pp, &Patch::Json::<()>(ops)).await.unwrap();
    assert_eq!(patched.data.unwrap()["b"], "20");
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/b", "value": "nope"}]))
            .unwrap();
    let err = api_status(
        cms.patch("c", &pp, &Patch::Json::<()>(failing))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);

    // A patch carrying a stale resourceVersion conflicts.
    let stale = cms
        .patch(
            "c",
            &pp,
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"z": "z"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_status(stale).code, 409);

    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [
                {"name": "a", "image": "a:1", "ports": [{"containerPort": 80}]},
                {"name": "b", "image": "b:1"}
            ]}}
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let patched = deployments
        .patch(
            "d",
            &pp,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "b", "image": "b:2"},
                {"name": "a", "ports": [{"containerPort": 81}]}
            ]}}}})),
        )
        .await
        .unwrap();
    let containers = patched.spec.unwrap().template.spec.unwrap().containers;
    assert_eq!(containers.len(), 2);
    assert_eq!(containers[0].image.as_deref(), Some("a:1"));
    assert_eq!(containers[0].ports.as_ref().unwrap().len(), 2);
    assert_eq!(containers[1].image.as_deref(), Some("b:2"));

    // Custom resources do not take strategic merge patches.
    let models: Api<Model> = Api::default_namespaced(client);
    models
        .create(&PostParams::default(), &Model::new("m", model_spec()))
        .await
        .unwrap();
    let err = models
        .patch("m", &pp, &Patch::Strategic(json!({"spec": {"image": "x"}})))
        .await
        .unwrap_err();
    assert_eq!(api_status(err).code, 415);
}

fn model_spec() -> ModelSpec {
    ModelSpec {
        backend: "vllm".into(),
        source: "HF://org/model".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn server_side_apply_ownership_conflicts_and_idempotence() {
    let server = TestApiServer::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let alice = PatchParams::apply("alice");
    let bob = PatchParams::apply("bob");

    let created = cms
        .patch(
            "cfg",
            &alice,
            &Patch::Apply(cm_config(json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap();
    let managed = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(managed.len(), 1);
    assert_eq!(managed[0].manager.as_deref(), Some("alice"));
    assert_eq!(managed[0].operation.as_deref(), Some("Apply"));
    let fields = serde_json::to_value(managed[0].fields_v1.as_ref().unwrap()).unwrap();
    assert_eq!(fields, json!({"f:data": {"f:a": {}, "f:b": {}}}));

    // Applying the same configuration again changes nothing at all.
    let writes_before = server.writes(Verb::Patch, "configmaps");
    let again = cms
        .patch(
            "cfg",
            &alice,
            &Patch::Apply(cm_config(json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(
        again.metadata.managed_fields,
        created.metadata.managed_fields
    );
    assert_eq!(server.writes(Verb::Patch, "configmaps"), writes_before + 1);

    // Another manager changing alice's field conflicts...
    let err = api_status(
        cms.patch("cfg", &bob, &Patch::Apply(cm_config(json!({"a": "9"}))))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message.contains("conflict with \"alice\": .data.a"),
        "{}",
        err.message
    );
    let causes = &err.details.as_ref().unwrap().causes;
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].field, ".data.a");

    // ...unless it agrees with the current value (shared ownership)...
    cms.patch(
        "cfg",
        &bob,
        &Patch::Apply(cm_config(json!({"a": "1", "c": "3"}))),
    )
    .await
    .unwrap();
    // ...or forces, which takes the field over.
    let forced = cms
        .patch(
            "cfg",
            &bob.clone().force(),
            &Patch::Apply(cm_config(json!({"a": "9", "c": "3"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.as_ref().unwrap()["a"], "9");
    let alice_fields = forced
        .metadata
        .managed_fields
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.manager.as_deref() == Some("alice"))
        .map(|m| serde_json::to_value(m.fields_v1.as_ref().unwrap()).unwrap())
        .unwrap();
    assert_eq!(alice_fields, json!({"f:data": {"f:b": {}}}));

    // Fields a manager stops applying are removed unless others own them.
    let dropped = cms
        .patch("cfg", &alice, &Patch::Apply(cm_config(json!({}))))
        .await
        .unwrap();
    let data = dropped.data.unwrap();
    assert!(!data.contains_key("b"));
    assert_eq!(data["a"], "9");
    assert_eq!(data["c"], "3");

    // Non-apply writes take ownership too.
    let edited = cms
        .patch(
            "cfg",
            &PatchParams {
                field_manager: Some("editor".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"c": "4"}})),
        )
        .await
        .unwrap();
    let editor = edited
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("editor"))
        .unwrap();
    assert_eq!(editor.operation.as_deref(), Some("Update"));
    let err = api_status(
        cms.patch(
            "cfg",
            &bob,
            &Patch::Apply(cm_config(json!({"a": "9", "c": "3"}))),
        )
        .await
        .unwrap_err(),
    );
    assert!(err.message.contains("editor"), "{}", err.message);

    // Apply requires a field manager.
    let err = api_status(
        cms.patch(
            "cfg",
            &PatchParams::default(),
            &Patch::Apply(cm_config(json!({}))),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
}

#[tokio::test]
async fn status_subresource_separates_spec_and_status() {
    let server = TestApiServer::start().await;
    let models: Api<Model> = Api::default_namespaced(server.client());
    let mut model = Model::new("m", model_spec());
    model.status = Some(serde_json::from_value(json!({"phase": "Ready"})).unwrap());
    let created = models.create(&PostParams::default(), &model).await.unwrap();
    assert!(created.status.is_none(), "status is ignored on create");

    let pp = PatchParams::apply("operator").force();
    let status = models
        .patch_status(
            "m",
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
                "metadata": {"name": "m"},
                "spec": {"backend": "ignored", "source": "ignored"},
                "status": {"phase": "Loading", "conditions": [{"type": "Ready", "status": "False", "reason": "StartingBackend", "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}
            })),
        )
        .await
        .unwrap();
    assert_eq!(status.spec.backend, "vllm", "status writes ignore spec");
    assert_eq!(status.metadata.generation, Some(1));
    let st = serde_json::to_value(status.status.as_ref().unwrap()).unwrap();
    assert_eq!(st["phase"], "Loading");
    let entry = status
        .metadata
        .managed_fields
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.manager.as_deref() == Some("operator"))
        .unwrap();
    assert_eq!(entry.subresource.as_deref(), Some("status"));

    // Main-resource writes ignore status.
    let main = models
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": "custom"}, "status": {"phase": "Failed"}})),
        )
        .await
        .unwrap();
    assert_eq!(main.spec.image.as_deref(), Some("custom"));
    assert_eq!(main.metadata.generation, Some(2));
    assert_eq!(
        serde_json::to_value(main.status.as_ref().unwrap()).unwrap()["phase"],
        "Loading"
    );

    // Conditions merge by type through apply from another manager.
    let merged = models
        .patch_status(
            "m",
            &PatchParams::apply("other"),
            &Patch::Apply(json!({
                "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
                "metadata": {"name": "m"},
                "status": {"conditions": [{"type": "Cached", "status": "True", "reason": "Done", "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}
            })),
        )
        .await
        .unwrap();
    let st = serde_json::to_value(merged.status.unwrap()).unwrap();
    assert_eq!(st["conditions"].as_array().unwrap().len(), 2);

    let got = models.get_status("m").await.unwrap();
    assert_eq!(
        got.metadata.resource_version,
        merged.metadata.resource_version
    );

    // Schema validation applies to custom resources.
    let err = api_status(
        models
            .patch(
                "m",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"source": 5}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
}
