//! The KubeSchedulerConfiguration shipped in the Helm chart agrees with
//! the extender's routes and defaults.

use flexinfer_sched::config::DEFAULT_LISTEN;
use serde_yaml::Value;

const CONFIG: &str = include_str!("../../../helm/flexinfer/files/scheduler-config.yaml");

#[test]
fn shipped_configuration_points_kube_scheduler_at_the_extender() {
    let config: Value = serde_yaml::from_str(CONFIG).expect("valid YAML");
    assert_eq!(config["apiVersion"], "kubescheduler.config.k8s.io/v1");
    assert_eq!(config["kind"], "KubeSchedulerConfiguration");
    assert_eq!(
        config["profiles"][0]["schedulerName"],
        "flexinfer-scheduler"
    );

    let extenders = config["extenders"].as_sequence().expect("extenders");
    assert_eq!(extenders.len(), 1);
    let extender = &extenders[0];
    // The verbs are appended to urlPrefix: they must be our routes.
    assert_eq!(extender["filterVerb"], "filter");
    assert_eq!(extender["prioritizeVerb"], "prioritize");
    let url = extender["urlPrefix"].as_str().unwrap();
    let port = DEFAULT_LISTEN.rsplit(':').next().unwrap();
    assert!(url.starts_with("http://"), "{url}");
    assert!(url.ends_with(&format!(":{port}")), "{url}");
    assert_eq!(extender["enableHTTPS"], false);
    // Full nodes are sent: the extender's default runs without a node cache.
    assert_eq!(extender["nodeCacheCapable"], false);
    let weight = extender["weight"].as_i64().unwrap();
    assert!(weight > 0);
    assert_eq!(extender["ignorable"], false);
    // Only fields of the v1 Extender type.
    let known = [
        "urlPrefix",
        "filterVerb",
        "preemptVerb",
        "prioritizeVerb",
        "weight",
        "bindVerb",
        "enableHTTPS",
        "tlsConfig",
        "httpTimeout",
        "nodeCacheCapable",
        "managedResources",
        "ignorable",
    ];
    for key in extender.as_mapping().unwrap().keys() {
        assert!(known.contains(&key.as_str().unwrap()), "{key:?}");
    }
}
