use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use flexinfer_testkube::{TestApiServer, Verb};

use crate::config_map;

async fn fast_bookmarks() -> TestApiServer {
    TestApiServer::builder()
        .bookmark_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn watch_streams_changes_in_order_with_bookmarks() {
    let server = fast_bookmarks().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &config_map("before", &[]))
        .await
        .unwrap();
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();

    let wp = WatchParams::default().timeout(10);
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();

    api.create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    let mut bookmark_rv = None;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("event in time")
        .unwrap()
    {
        match ev {
            WatchEvent::Added(o) => seen.push(("ADDED", o.metadata.name.unwrap())),
            WatchEvent::Modified(o) => seen.push(("MODIFIED", o.metadata.name.unwrap())),
            WatchEvent::Deleted(o) => seen.push(("DELETED", o.metadata.name.unwrap())),
            WatchEvent::Bookmark(b) => {
                if seen.len() == 3 {
                    bookmark_rv = Some(b.metadata.resource_version);
                    break;
                }
            }
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        }
    }
    assert_eq!(
        seen,
        [
            ("ADDED", "a".into()),
            ("MODIFIED", "a".into()),
            ("DELETED", "a".into())
        ]
    );
    assert_eq!(bookmark_rv.unwrap(), server.resource_version().to_string());

    // Watching from the beginning sends the current objects first.
    let mut from_start = api.watch(&wp, "0").await.unwrap().boxed();
    match from_start.try_next().await.unwrap() {
        Some(WatchEvent::Added(o)) => assert_eq!(o.metadata.name.as_deref(), Some("before")),
        other => panic!("expected ADDED, got {other:?}"),
    }
}

#[tokio::test]
async fn too_old_resource_version_is_gone() {
    let server = TestApiServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    server.expire_watch_history();
    let mut stream = api
        .watch(&WatchParams::default(), "1")
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn small_history_expires_slow_watches() {
    let server = TestApiServer::builder()
        .watch_history(2)
        .start()
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let first = api
        .create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    for i in 0..3 {
        api.create(&PostParams::default(), &config_map(&format!("b{i}"), &[]))
            .await
            .unwrap();
    }
    let rv = first.metadata.resource_version.unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    assert!(
        matches!(stream.try_next().await.unwrap(), Some(WatchEvent::Error(e)) if e.code == 410)
    );
}

#[tokio::test]
async fn watcher_relists_after_410() {
    let server = fast_bookmarks().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();

    let mut events = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    let mut inits = 0;
    let mut init_done = 0;
    let mut applied_after = Vec::new();
    let mut expired = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        let ev = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("watcher event in time")
            .expect("stream continues");
        match ev {
            Ok(Event::Init) => inits += 1,
            Ok(Event::InitDone) => {
                init_done += 1;
                if init_done == 1 {
                    // Make the watch's resourceVersion too old, then change
                    // something: the watcher must relist.
                    server.expire_watch_history();
                    api.create(&PostParams::default(), &config_map("b", &[]))
                        .await
                        .unwrap();
                } else {
                    break;
                }
            }
            Ok(Event::InitApply(o)) if init_done == 1 => {
                applied_after.push(o.metadata.name.unwrap());
            }
            Ok(_) => {}
            Err(watcher::Error::WatchError(e)) if e.code == 410 => expired = true,
            Err(e) => panic!("unexpected watcher error {e:?}"),
        }
    }
    assert!(expired, "the watch saw 410 Gone");
    assert_eq!(inits, 2, "the watcher relisted");
    assert_eq!(applied_after, ["a", "b"]);
    assert_eq!(server.requests(Verb::List, "configmaps"), 2);
}

#[tokio::test]
async fn watcher_streaming_lists_and_selectors() {
    let server = fast_bookmarks().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let mut labelled = config_map("a", &[]);
    labelled.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    api.create(&PostParams::default(), &labelled).await.unwrap();
    api.create(&PostParams::default(), &config_map("unlabelled", &[]))
        .await
        .unwrap();

    let config = watcher::Config::default()
        .streaming_lists()
        .labels("app=web");
    let mut events = watcher::watcher(api.clone(), config).boxed();
    async fn next(
        events: &mut futures::stream::BoxStream<'static, watcher::Result<Event<ConfigMap>>>,
    ) -> Event<ConfigMap> {
        tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .expect("event in time")
            .unwrap()
            .unwrap()
    }
    assert!(matches!(next(&mut events).await, Event::Init));
    assert!(
        matches!(next(&mut events).await, Event::InitApply(o) if o.metadata.name.as_deref() == Some("a"))
    );
    assert!(matches!(next(&mut events).await, Event::InitDone));
    assert_eq!(
        server.requests(Verb::List, "configmaps"),
        0,
        "streaming list uses watch only"
    );

    // Relabelling out of the selector looks like a deletion.
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(next(&mut events).await, Event::Delete(o) if o.metadata.name.as_deref() == Some("a"))
    );
    api.patch(
        "unlabelled",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(next(&mut events).await, Event::Apply(o) if o.metadata.name.as_deref() == Some("unlabelled"))
    );
}

#[tokio::test]
async fn metadata_lists_and_watches() {
    use flexinfer_crds::v1alpha2::{Model, ModelSpec};
    use kube::core::PartialObjectMeta;
    use kube::runtime::WatchStreamExt;

    let server = fast_bookmarks().await;
    let models: Api<Model> = Api::default_namespaced(server.client());
    let spec = ModelSpec {
        backend: "vllm".into(),
        source: "HF://org/m".into(),
        ..Default::default()
    };
    models
        .create(&PostParams::default(), &Model::new("m", spec))
        .await
        .unwrap();
    let metas = models.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(metas.items[0].metadata.name.as_deref(), Some("m"));
    let one = models.get_metadata("m").await.unwrap();
    assert_eq!(one.metadata.generation, Some(1));

    let partial: Api<PartialObjectMeta<Model>> = Api::default_namespaced(server.client());
    let mut applied = watcher::watcher(partial, watcher::Config::default())
        .applied_objects()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), applied.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("m"));
    models
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), applied.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.metadata.labels.unwrap()["a"], "b");
}

#[tokio::test]
async fn watch_ends_after_timeout_seconds() {
    let server = TestApiServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let rv = server.resource_version().to_string();
    let started = tokio::time::Instant::now();
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    let end = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("stream ends in time")
        .unwrap();
    assert!(end.is_none());
    assert!(started.elapsed() >= Duration::from_millis(900));
}
