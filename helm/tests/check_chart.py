#!/usr/bin/env python3
"""Renders the FlexInfer chart offline and validates everything it renders.

For each values set (chart defaults, values-all.yaml, values-ha.yaml,
values-global.yaml):

1. `helm lint --strict` and the chart's values.schema.json (helm-python-sdk,
   which embeds Helm's Go SDK; no helm binary or cluster needed);
2. render the templates and validate every object: built-in kinds against
   the Kubernetes OpenAPI schemas (kubernetes-validate, strict, 1.32.0),
   FlexInfer custom resources against the chart's own CRD schemas
   (jsonschema, unknown fields rejected), Prometheus Operator kinds against
   the few fields FlexInfer sets;
3. check what the chart promises: two renders are identical (nothing
   random, nothing looked up: GitOps tools render again and compare), names,
   labels and selectors agree,
   security contexts, probes, resources, images, the scheduler
   configuration, the PrometheusRule matches files/prometheus-rules.yaml,
   and RBAC is least-privilege-structured (one ServiceAccount per
   component, bound only to its own roles, no wildcards, no Secrets unless
   catalog.registryCredentials or operator.federation.enabled is on, and
   then only `get`, only for the component running the controllers, only
   in the watched namespaces; the global gateway's Role only in its
   GlobalProxy's namespace), the controllers always elect a leader, the
   second kube-scheduler follows the cluster's version and puts nothing in
   kube-system nor a system priority class outside it, and the pre-delete
   hook deletes the Models that would otherwise outlive their controllers.

The example manifests under crds/examples/ and the FlexInfer objects in the
examples of docs/*.md are validated against the CRD schemas too. A JSON summary (environment variables and flags of every
FlexInfer container, and the controller settings each values set asks for)
is written to --summary for the Rust test to compare with the binaries'
command lines.

`--render OUT [--values JSON]` only renders (no lint, no checks) and writes
the rendered objects, as a JSON list, to OUT; the chart scenario lane reads
it to start the components as the manifests describe.

Exit status: 0 when everything passed, 1 on a failed check, 3 when a
required Python package is missing.
"""

from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import re
import sys

try:
    import helm_python
    import jsonschema
    import kubernetes_validate
    import yaml
    from helm_python import Chart
except ImportError as err:  # pragma: no cover - reported to the Rust test
    print(f"missing Python package: {err.name} (run scripts/setup.sh)", file=sys.stderr)
    sys.exit(3)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHART = os.path.join(ROOT, "helm", "flexinfer")
KUBE_VERSION = "1.32.0"
RELEASE = "flexinfer"
NAMESPACE = "flexinfer-system"

# ServiceAccounts that may be bound to Kubernetes' own roles, and which.
SYSTEM_ROLES = {
    "scheduler": {
        "system:kube-scheduler",
        "system:volume-scheduler",
        "extension-apiserver-authentication-reader",
    }
}

FAILURES: list[str] = []


def fail(message: str) -> None:
    FAILURES.append(message)


def check(condition: bool, message: str) -> bool:
    if not condition:
        fail(message)
    return condition


# ---------------------------------------------------------------------------
# CRD schemas as JSON Schema


def strict_schema(node):
    """An openAPIV3Schema node as JSON Schema that rejects unknown fields
    (what `kubectl apply --validate=strict` does) and accepts
    int-or-string values."""
    if isinstance(node, list):
        return [strict_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties"):
            out[key] = {name: strict_schema(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = strict_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [strict_schema(child) for child in value]
        elif key.startswith("x-kubernetes-"):
            continue
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def load_crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> JSON Schema, from the chart's crds/."""
    schemas = {}
    for path in sorted(glob.glob(os.path.join(CHART, "crds", "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            for crd in yaml.safe_load_all(f):
                if not crd:
                    continue
                check(
                    kube_valid(crd, path),
                    f"{path}: CustomResourceDefinition fails the Kubernetes schema",
                )
                group = crd["spec"]["group"]
                kind = crd["spec"]["names"]["kind"]
                for version in crd["spec"]["versions"]:
                    schema = strict_schema(version["schema"]["openAPIV3Schema"])
                    # The API server validates metadata itself.
                    schema.setdefault("properties", {})["metadata"] = {"type": "object"}
                    schema["properties"]["apiVersion"] = {"type": "string"}
                    schema["properties"]["kind"] = {"type": "string"}
                    schemas[(f"{group}/{version['name']}", kind)] = schema
    check(len(schemas) >= 9, f"only {len(schemas)} CRD schemas found under {CHART}/crds")
    return schemas


def validate_custom_resource(obj: dict, where: str, schemas) -> None:
    key = (obj.get("apiVersion"), obj.get("kind"))
    schema = schemas.get(key)
    if not check(schema is not None, f"{where}: no CRD schema for {key}"):
        return
    errors = sorted(
        jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.path)
    )
    for error in errors:
        path = ".".join(str(p) for p in error.path)
        fail(f"{where}: {obj['kind']}/{obj['metadata'].get('name')}: {path}: {error.message}")
    name = obj.get("metadata", {}).get("name", "")
    check(
        bool(name) and len(name) <= 253,
        f"{where}: {obj.get('kind')} has no valid metadata.name",
    )


# ---------------------------------------------------------------------------
# Built-in kinds


def validate_gateway_class(obj: dict, where: str):
    """The GatewayClass, by the Gateway API's own rules for its fields
    (its CRD is not part of Kubernetes' schemas; the real-cluster lane
    creates it against the real CRD)."""
    check(obj.get("kind") == "GatewayClass", f"{where}: unexpected Gateway API kind {obj.get('kind')}")
    controller = obj.get("spec", {}).get("controllerName", "")
    check(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9/\-._~%!$&'()*+,;=:]+", controller or "") is not None
          and len(controller) <= 253, f"{where}: GatewayClass controllerName {controller!r} is not a domain-prefixed path")
    check(len(obj.get("spec", {}).get("description", "").encode()) <= 64,
          f"{where}: GatewayClass description longer than the CRD's 64 bytes")
    check(set(obj.get("spec", {})) <= {"controllerName", "description", "parametersRef"},
          f"{where}: GatewayClass spec fields {sorted(obj.get('spec', {}))}")


def kube_valid(obj: dict, where: str) -> bool:
    try:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        return True
    except kubernetes_validate.ValidationError as err:
        path = ".".join(str(p) for p in err.path)
        fail(f"{where}: {obj.get('kind')}/{obj.get('metadata', {}).get('name')}: {path}: {err.message}")
    except kubernetes_validate.SchemaNotFoundError as err:
        fail(f"{where}: no Kubernetes {KUBE_VERSION} schema for {obj.get('apiVersion')} {obj.get('kind')}: {err}")
    return False


def validate_monitoring(obj: dict, where: str) -> None:
    """Prometheus Operator kinds: no schema ships with kubernetes-validate;
    check the fields the chart sets."""
    kind = obj["kind"]
    spec = obj.get("spec", {})
    label = f"{where}: {kind}/{obj['metadata']['name']}"
    check(obj["apiVersion"] == "monitoring.coreos.com/v1", f"{label}: apiVersion")
    if kind == "ServiceMonitor":
        check(bool(spec.get("selector", {}).get("matchLabels")), f"{label}: selector")
        for endpoint in spec.get("endpoints", []):
            check(set(endpoint) <= {"port", "path", "interval"}, f"{label}: endpoint keys {set(endpoint)}")
        check(bool(spec.get("endpoints")), f"{label}: endpoints")
    elif kind == "PodMonitor":
        check(bool(spec.get("selector", {}).get("matchLabels")), f"{label}: selector")
        check(bool(spec.get("podMetricsEndpoints")), f"{label}: podMetricsEndpoints")
    elif kind == "PrometheusRule":
        for group in spec.get("groups", []):
            check(set(group) <= {"name", "rules", "interval"}, f"{label}: group keys")
            for rule in group["rules"]:
                check(set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, f"{label}: rule keys")
                check(bool(rule.get("alert")) and bool(rule.get("expr")), f"{label}: alert/expr")
    else:
        fail(f"{label}: unexpected kind")


# ---------------------------------------------------------------------------
# Rendering


def render(values: dict | None, label: str) -> list[dict]:
    report = helm_python.lint(CHART, values, strict=True, namespace=NAMESPACE)
    for message in report.get("messages", []):
        if message.get("severity", 0) >= 2:
            fail(f"{label}: helm lint: {message.get('path')}: {message.get('error')}")
    for error in report.get("errors", []):
        fail(f"{label}: helm lint: {error}")
    chart = Chart.load(CHART)
    try:
        chart.validate_schema(values)
    except helm_python.HelmError as err:
        fail(f"{label}: values.schema.json rejects the values: {err}")
    manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    # A render is a pure function of the values (GitOps tools render again
    # and again, and compare): nothing random, nothing read from a cluster.
    again = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    differ = sorted(p for p in set(manifests) | set(again) if manifests.get(p) != again.get(p))
    check(not differ, f"{label}: two renders differ in {differ}")
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            check("kubectl" in text, f"{label}: NOTES.txt renders no instructions")
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("metadata", {})
                objects.append(doc | {"__template__": path})
    return objects


def strip(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k != "__template__"}


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def find(objects, kind, name):
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    return None


def pod_spec(obj):
    return obj["spec"]["template"]["spec"]


# ---------------------------------------------------------------------------
# Semantic checks


def check_workloads(objects, values, label):
    workloads = by_kind(objects, "Deployment") + by_kind(objects, "DaemonSet")
    services = by_kind(objects, "Service")
    for w in workloads:
        name = f"{label}: {w['kind']}/{w['metadata']['name']}"
        spec = pod_spec(w)
        selector = w["spec"]["selector"]["matchLabels"]
        pod_labels = w["spec"]["template"]["metadata"]["labels"]
        check(
            all(pod_labels.get(k) == v for k, v in selector.items()),
            f"{name}: selector {selector} does not match pod labels",
        )
        check(
            "app.kubernetes.io/component" in selector,
            f"{name}: selector lacks the component label",
        )
        psc = spec.get("securityContext", {})
        check(psc.get("runAsNonRoot") is True, f"{name}: pod not runAsNonRoot")
        check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{name}: seccomp")
        sa = spec.get("serviceAccountName")
        check(bool(sa), f"{name}: no serviceAccountName")
        check(
            find(objects, "ServiceAccount", sa) is not None,
            f"{name}: ServiceAccount {sa} is not rendered",
        )
        for c in spec["containers"]:
            cname = f"{name} container {c['name']}"
            sc = c.get("securityContext", {})
            check(sc.get("readOnlyRootFilesystem") is True, f"{cname}: root fs writable")
            check(sc.get("allowPrivilegeEscalation") is False, f"{cname}: privilege escalation")
            check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{cname}: capabilities not dropped")
            check(not sc.get("privileged"), f"{cname}: privileged")
            check(bool(c.get("resources", {}).get("requests")), f"{cname}: no resource requests")
            check("livenessProbe" in c and "readinessProbe" in c, f"{cname}: probes missing")
            ports = {p["name"] for p in c.get("ports", [])}
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                port = c.get(probe, {}).get("httpGet", {}).get("port")
                if port is not None and isinstance(port, str):
                    check(port in ports, f"{cname}: {probe} uses unknown port {port}")
            image = c["image"]
            check(":" in image.rsplit("/", 1)[-1], f"{cname}: image {image} has no tag")
        # Services route to these pods' named ports.
    for s in services:
        name = f"{label}: Service/{s['metadata']['name']}"
        sel = s["spec"]["selector"]
        targets = [
            w for w in workloads
            if all(w["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())
        ]
        if not check(len(targets) == 1, f"{name}: selects {len(targets)} workloads"):
            continue
        ports = {p["name"] for c in pod_spec(targets[0])["containers"] for p in c.get("ports", [])}
        for p in s["spec"]["ports"]:
            check(p["targetPort"] in ports, f"{name}: targetPort {p['targetPort']} not a container port")
    for pdb in by_kind(objects, "PodDisruptionBudget"):
        sel = pdb["spec"]["selector"]["matchLabels"]
        matches = [
            w for w in workloads
            if all(w["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())
        ]
        check(len(matches) == 1, f"{label}: PodDisruptionBudget/{pdb['metadata']['name']} selects {len(matches)} workloads")


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def check_gateway(objects, values, label, expect):
    gw = find(objects, "Deployment", expect["proxy"])
    if not check(gw is not None, f"{label}: gateway Deployment {expect['proxy']} missing"):
        return
    c = pod_spec(gw)["containers"][0]
    env = env_of(c)
    check(env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace", f"{label}: POD_NAMESPACE")
    check(c["image"] == expect["gateway_image"], f"{label}: gateway image {c['image']} != {expect['gateway_image']}")
    check(("--embedded-operator" in c["args"]) == expect["embedded"], f"{label}: --embedded-operator")
    if expect.get("global"):
        # Global mode excludes Kubernetes mode and its namespace flags.
        check(f"--global-object={expect['global']}" in c["args"], f"{label}: --global-object={expect['global']} in {c['args']}")
        check(not any(a.startswith(("--kubernetes", "--namespaces", "--all-namespaces")) for a in c["args"]),
              f"{label}: global gateway also in Kubernetes mode: {c['args']}")
        ref = env.get("FLEXINFER_GLOBAL_MEMBER_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef")
        check(ref == expect.get("member_token"), f"{label}: FLEXINFER_GLOBAL_MEMBER_TOKEN from {ref}")
    else:
        check("--kubernetes" in c["args"], f"{label}: gateway not in Kubernetes mode")
        check(not any(a.startswith("--global") for a in c["args"]) and not any(n.startswith("FLEXINFER_GLOBAL") for n in env),
              f"{label}: global-mode settings while global mode is off")
        if expect["all_namespaces"]:
            check("--all-namespaces" in c["args"], f"{label}: --all-namespaces")
        else:
            check(f"--namespaces={expect['namespaces']}" in c["args"], f"{label}: --namespaces={expect['namespaces']} in {c['args']}")
    if expect["embedded"]:
        # Always, even with one replica: a rolling update (maxSurge) runs the
        # old and the new pod side by side.
        check(env["FLEXINFER_LEADER_ELECT"]["value"] == "true", f"{label}: leader election")
    else:
        # The gateway refuses controller options without --embedded-operator.
        stray = sorted(set(env) & set(CONTROLLER_ENV))
        check(not stray, f"{label}: controller settings {stray} on a gateway without the embedded operator")
    check(c["livenessProbe"]["httpGet"]["path"] == "/healthz", f"{label}: gateway liveness path")
    check(c["readinessProbe"]["httpGet"]["path"] == "/readyz", f"{label}: gateway readiness path")
    check(gw["spec"]["replicas"] == expect["replicas"], f"{label}: gateway replicas")
    svc = find(objects, "Service", expect["proxy"])
    check(svc is not None and svc["spec"]["ports"][0]["port"] == expect["service_port"], f"{label}: gateway Service port")
    # Shutdown fits in the grace period.
    grace = pod_spec(gw)["terminationGracePeriodSeconds"]
    pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    total = pre_stop + seconds(env["PROXY_SHUTDOWN_DRAIN_DELAY"]["value"]) + seconds(env["PROXY_GRACEFUL_SHUTDOWN_TIMEOUT"]["value"])
    check(total < grace, f"{label}: preStop + drain + graceful shutdown {total}s not below the grace period {grace}s")
    check(pre_stop == expect.get("pre_stop", 5), f"{label}: preStop sleep {pre_stop}s")
    # Replicas share routing state: a headless Service naming them all, a
    # shared secret mounted from a Secret that exists (docs/routing.md).
    if not expect.get("global") and values_peers_enabled(values):
        peers_svc = find(objects, "Service", expect["proxy"] + "-peers")
        if check(peers_svc is not None, f"{label}: peer Service {expect['proxy']}-peers missing"):
            check(peers_svc["spec"].get("clusterIP") == "None", f"{label}: peer Service not headless")
            check(peers_svc["spec"].get("publishNotReadyAddresses") is True,
                  f"{label}: peer Service hides starting replicas")
        check(env.get("PROXY_ROUTING_PEERS", {}).get("value", "").startswith(expect["proxy"] + "-peers."),
              f"{label}: PROXY_ROUTING_PEERS does not name the peer Service")
        secret_name = env.get("PROXY_ROUTING_PEER_SECRET_NAME", {}).get("value")
        existing = ((values or {}).get("gateway", {}).get("peers", {}) or {}).get("existingSecret")
        rendered = find(objects, "Secret", secret_name) if secret_name else None
        check(secret_name is not None and (existing == secret_name or rendered is not None),
              f"{label}: the peer secret names no Secret ({secret_name})")
        # Nothing random in a render: the chart's peer Secret holds no data
        # (the gateway writes it), and the gateway generates only its own.
        check(rendered is None or not (rendered.get("data") or rendered.get("stringData")),
              f"{label}: the peer Secret is rendered with data")
        check(env.get("PROXY_ROUTING_PEER_SECRET_GENERATE", {}).get("value") == ("false" if existing else "true"),
              f"{label}: PROXY_ROUTING_PEER_SECRET_GENERATE with existingSecret={existing!r}")
    else:
        check("PROXY_ROUTING_PEERS" not in env, f"{label}: peers set with sharing off")
    if expect.get("auth"):
        ref = env["PROXY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
        check(ref == expect["auth"], f"{label}: PROXY_AUTH_TOKEN from {ref}")
    else:
        check("PROXY_AUTH_TOKEN" not in env, f"{label}: auth token set while auth is off")


def seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in ("ms", "s", "m", "h"):
        if text.endswith(unit) and text[: -len(unit)].replace(".", "", 1).isdigit():
            return float(text[: -len(unit)]) * units[unit]
    raise ValueError(f"cannot read duration {text!r}")


# Variables of the controllers' options (flexinfer_operator::settings),
# which the operator and the gateway with --embedded-operator both read.
CONTROLLER_ENV = (
    "FLEXINFER_SCHEDULER_NAME", "DEFAULT_FLASH_LOADER_IMAGE", "DEFAULT_QUANTIZER_IMAGE",
    "DEFAULT_SHM_SIZE_LIMIT", "FLEXINFER_FEDERATION", "FLEXINFER_CLUSTER_FAILURE_THRESHOLD",
)


def values_peers_enabled(values) -> bool:
    """Whether the values leave gateway.peers.enabled on (the default)."""
    peers = ((values or {}).get("gateway", {}) or {}).get("peers", {}) or {}
    return peers.get("enabled", True) is not False


def check_controllers(objects, label, expect):
    """The container running the controllers (the operator, or the gateway
    with the embedded operator) gets the controllers' settings from the
    values: scheduler name, flash-loader and quantizer images, operator.env."""
    ctl = expect["controllers"]
    dep = find(objects, "Deployment", ctl["workload"])
    if not check(dep is not None, f"{label}: {ctl['workload']} (runs the controllers) missing"):
        return
    env = env_of(pod_spec(dep)["containers"][0])
    value = lambda name: env.get(name, {}).get("value")
    where = f"{label}: {ctl['workload']}"
    check(value("FLEXINFER_SCHEDULER_NAME") == ctl["scheduler_name"],
          f"{where}: FLEXINFER_SCHEDULER_NAME {value('FLEXINFER_SCHEDULER_NAME')!r} != {ctl['scheduler_name']!r}")
    check(value("DEFAULT_FLASH_LOADER_IMAGE") == ctl["flashload_image"],
          f"{where}: flash-loader image {value('DEFAULT_FLASH_LOADER_IMAGE')!r}")
    check(value("DEFAULT_QUANTIZER_IMAGE") == ctl["quantizer_image"],
          f"{where}: quantizer image {value('DEFAULT_QUANTIZER_IMAGE')!r} != {ctl['quantizer_image']!r}")
    for name, image in ctl["image_overrides"].items():
        check(value(name) == image, f"{where}: operator.env {name} not passed through")
    names = [e["name"] for e in pod_spec(dep)["containers"][0].get("env", [])]
    check(len(names) == len(set(names)), f"{where}: duplicate environment variables {names}")


def check_operator(objects, label, expect):
    dep = find(objects, "Deployment", expect["fullname"] + "-operator")
    if not expect.get("operator"):
        check(dep is None, f"{label}: standalone operator rendered while disabled")
        return
    if not check(dep is not None, f"{label}: operator Deployment missing"):
        return
    c = pod_spec(dep)["containers"][0]
    env = env_of(c)
    op = expect["operator"]
    check(dep["spec"]["replicas"] == op["replicas"], f"{label}: operator replicas")
    check(dep["spec"]["strategy"]["type"] == "Recreate", f"{label}: operator rollouts must not wait for a second leader")
    check(env["LEADER_ELECT"]["value"] == "true", f"{label}: operator LEADER_ELECT (whatever the replicas)")
    check(env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace", f"{label}: Lease namespace")
    check(env.get("WATCH_NAMESPACE", {}).get("value") == op["watch_namespace"], f"{label}: WATCH_NAMESPACE {env.get('WATCH_NAMESPACE')}")
    check(f"--leader-election-id={op['lease']}" in c["args"], f"{label}: lease name in {c['args']}")
    if op.get("federation"):
        check(env.get("FLEXINFER_FEDERATION", {}).get("value") == "true", f"{label}: FLEXINFER_FEDERATION")
        check(env.get("FLEXINFER_CLUSTER_FAILURE_THRESHOLD", {}).get("value") == str(op["federation"]),
              f"{label}: FLEXINFER_CLUSTER_FAILURE_THRESHOLD {env.get('FLEXINFER_CLUSTER_FAILURE_THRESHOLD')}")
    else:
        check("FLEXINFER_FEDERATION" not in env and "FLEXINFER_CLUSTER_FAILURE_THRESHOLD" not in env,
              f"{label}: federation settings while federation is off")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(env["HEALTH_PROBE_BIND_ADDRESS"]["value"].endswith(f":{ports['health']}"), f"{label}: health port")
    check(env["METRICS_BIND_ADDRESS"]["value"].endswith(f":{ports['metrics']}"), f"{label}: metrics port")


def check_agent(objects, label, expect):
    ds = find(objects, "DaemonSet", expect["agent"])
    if "agent" not in expect["components"]:
        check(ds is None, f"{label}: agent rendered while disabled")
        return
    if not check(ds is not None, f"{label}: agent DaemonSet missing"):
        return
    spec = pod_spec(ds)
    env = env_of(spec["containers"][0])
    check(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName", f"{label}: NODE_NAME not from the downward API")
    tolerated = {t.get("key") for t in spec.get("tolerations", [])}
    check("nvidia.com/gpu" in tolerated, f"{label}: agent does not tolerate GPU nodes")


def check_scheduler(objects, label, expect):
    cm = find(objects, "ConfigMap", expect["scheduler"])
    if not expect["scheduler_enabled"]:
        check(cm is None and find(objects, "Deployment", expect["sched"]) is None, f"{label}: scheduler rendered while disabled")
        return
    if not check(cm is not None, f"{label}: scheduler ConfigMap missing"):
        return
    config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    check(config["kind"] == "KubeSchedulerConfiguration", f"{label}: scheduler config kind")
    check(config["apiVersion"] == "kubescheduler.config.k8s.io/v1", f"{label}: scheduler config apiVersion")
    check([p["schedulerName"] for p in config["profiles"]] == [expect["scheduler_name"]], f"{label}: profiles")
    ext = config["extenders"][0]
    svc = find(objects, "Service", expect["sched"])
    port = svc["spec"]["ports"][0]["port"]
    check(
        ext["urlPrefix"] == f"http://{expect['sched']}.{NAMESPACE}.svc:{port}",
        f"{label}: extender urlPrefix {ext['urlPrefix']}",
    )
    check(ext["filterVerb"] == "filter" and ext["prioritizeVerb"] == "prioritize", f"{label}: extender verbs")
    with open(os.path.join(CHART, "files", "scheduler-config.yaml"), encoding="utf-8") as f:
        shipped = yaml.safe_load(f)
    check(set(ext) == set(shipped["extenders"][0]), f"{label}: extender fields differ from files/scheduler-config.yaml")
    dep = find(objects, "Deployment", expect["scheduler"])
    vols = {v["name"]: v for v in pod_spec(dep)["volumes"]}
    check(vols["config"]["configMap"]["name"] == cm["metadata"]["name"], f"{label}: kube-scheduler mounts another ConfigMap")
    check_kube_scheduler_on_managed_clusters(objects, dep, label, expect["kube_scheduler"])


def check_kube_scheduler_on_managed_clusters(objects, dep, label, want):
    """What managed clusters refuse: a kube-scheduler newer than the API
    server (its image follows the cluster's version unless set), the
    system-cluster-critical class outside kube-system (GKE's quota), an
    object in kube-system (GKE Autopilot) unless asked for."""
    spec = pod_spec(dep)
    c = spec["containers"][0]
    if want["image"] is None:
        # The SDK renders for its default Kubernetes version: vX.Y.Z, no suffix.
        tag = c["image"].rpartition(":")[2]
        check(c["image"].startswith("registry.k8s.io/kube-scheduler:v") and
              all(part.isdigit() for part in tag[1:].split(".")) and tag.count(".") == 2,
              f"{label}: kube-scheduler image {c['image']} does not follow the cluster's version")
    else:
        check(c["image"] == want["image"], f"{label}: kube-scheduler image {c['image']} != {want['image']}")
    check(spec.get("priorityClassName") == want["priority"],
          f"{label}: kube-scheduler priorityClassName {spec.get('priorityClassName')!r} != {want['priority']!r}")
    in_kube_system = [f"{o['kind']}/{o['metadata']['name']}" for o in objects
                      if o["metadata"].get("namespace") == "kube-system"]
    skip = "--authentication-skip-lookup=true" in c["command"]
    if want["auth_reader"]:
        check(len(in_kube_system) == 1 and not skip,
              f"{label}: authenticationReader: kube-system objects {in_kube_system}, skip-lookup {skip}")
    else:
        check(not in_kube_system, f"{label}: objects in kube-system: {in_kube_system}")
        check(skip, f"{label}: kube-scheduler looks up a ConfigMap it may not read: {c['command']}")


def check_uninstall(objects, label, expect):
    """The pre-delete hook: a Job that deletes, while the controllers still
    run, the Models that would otherwise be deleted with them and wait for
    them (kubectl delete --wait), with a ServiceAccount that may do that
    alone. `expect["uninstall"]`: {namespace: kubectl delete arguments}, or
    None when no hook renders."""
    want = expect.get("uninstall")
    job = find(objects, "Job", expect["fullname"] + "-uninstall")
    if want is None:
        check(job is None, f"{label}: uninstall hook rendered with nothing to delete")
        return
    if not check(job is not None, f"{label}: uninstall hook Job missing"):
        return
    hooks = [o for o in objects if o["metadata"].get("annotations", {}).get("helm.sh/hook") == "pre-delete"]
    check({o["metadata"]["name"] for o in hooks} == {job["metadata"]["name"]},
          f"{label}: pre-delete hook objects {[o['kind'] + '/' + o['metadata']['name'] for o in hooks]}")
    weight = lambda o: int(o["metadata"]["annotations"]["helm.sh/hook-weight"])
    check(all(weight(o) < weight(job) for o in hooks if o is not job),
          f"{label}: the hook's ServiceAccount and RBAC must exist before its Job")
    spec = pod_spec(job)
    check(spec["restartPolicy"] == "Never" and spec["serviceAccountName"] == job["metadata"]["name"],
          f"{label}: uninstall Job pod")
    got = {}
    for c in spec["containers"]:
        args = c["args"]
        check(c["command"] == ["kubectl"] and args[0] == "delete" and "--wait=true" in args,
              f"{label}: uninstall container {c['name']} does not delete and wait: {c['command']} {args}")
        check(c["securityContext"]["readOnlyRootFilesystem"] is True, f"{label}: uninstall container root fs")
        ns = next((a.partition("=")[2] for a in args if a.startswith("--namespace=")), "*")
        got[ns] = [a for a in args[1:] if not a.startswith("--")] + (["--all"] if "--all" in args else [])
    check(got == want, f"{label}: uninstall deletes {got}, not {want}")
    # One Role per namespace it deletes in; a ClusterRole only for
    # --all-namespaces.
    roles = [o for o in hooks if o["kind"] in ("Role", "ClusterRole")]
    where = {o["metadata"].get("namespace", "*") if o["kind"] == "Role" else "*" for o in roles}
    check(len(roles) == len(want) and where == set(want) and all(r["rules"] == [{
        "apiGroups": ["ai.flexinfer"], "resources": ["models", "modeldeployments"],
        "verbs": ["get", "list", "watch", "delete"]}] for r in roles),
        f"{label}: uninstall rules {[(r['kind'], r['metadata'].get('namespace')) for r in roles]} for {sorted(want)}")
    bound = sorted(b["metadata"].get("namespace", "*") for b in hooks if b["kind"].endswith("Binding"))
    check(bound == sorted(want), f"{label}: uninstall bound in {bound}, deletes in {sorted(want)}")


def check_value_variants():
    """Values that change where the chart runs or what it leaves behind,
    rendered on top of the defaults: the scheduler released into
    kube-system keeps system-cluster-critical; the uninstall hook deletes
    every Model and ModelDeployment of each watched namespace, or of all
    namespaces, with `uninstall.deleteModels=all`, and nothing with `none`."""
    chart = Chart.load(CHART)

    def objects(values, namespace=NAMESPACE):
        out = []
        for path, text in sorted(chart.render(values, name=RELEASE, namespace=namespace, is_install=True).items()):
            if not path.endswith("NOTES.txt"):
                out.extend(doc | {"__template__": path} for doc in yaml.safe_load_all(text) if doc)
        return out

    rendered = objects({"scheduler": {"enabled": True}}, namespace="kube-system")
    dep = find(rendered, "Deployment", "flexinfer-scheduler")
    check(pod_spec(dep).get("priorityClassName") == "system-cluster-critical",
          "kube-system release: kube-scheduler without system-cluster-critical")
    all_kinds = ["models.ai.flexinfer,modeldeployments.ai.flexinfer", "--all"]
    for label, values, want in [
        ("uninstall all, two namespaces", {"uninstall": {"deleteModels": "all"}, "watch": {"namespaces": ["a", "b"]}},
         {"a": all_kinds, "b": all_kinds}),
        ("uninstall all, every namespace", {"uninstall": {"deleteModels": "all"}, "watch": {"allNamespaces": True}},
         {"*": all_kinds}),
        ("uninstall none", {"uninstall": {"deleteModels": "none"},
                            "models": {"m": {"spec": {"backend": "vllm", "source": "hf://org/m"}}}}, None),
        ("uninstall release", {"models": {"m": {"spec": {"backend": "vllm", "source": "hf://org/m"}}}},
         {NAMESPACE: ["models.ai.flexinfer/m"]}),
    ]:
        rendered = objects(values)
        for obj in rendered:
            if obj["kind"] in ("Job", "RoleBinding", "ClusterRoleBinding", "ClusterRole") and "uninstall" in obj["metadata"]["name"]:
                kube_valid(strip(obj), f"{label}: {obj['kind']}")
        check_uninstall(rendered, label, {"fullname": RELEASE, "uninstall": want})


def check_monitoring(objects, label, expect):
    rule = by_kind(objects, "PrometheusRule")
    if not expect["monitoring"]:
        check(not rule and not by_kind(objects, "ServiceMonitor"), f"{label}: monitoring objects rendered while disabled")
        return
    with open(os.path.join(CHART, "files", "prometheus-rules.yaml"), encoding="utf-8") as f:
        rules_file = yaml.safe_load(f)
    check(len(rule) == 1 and rule[0]["spec"] == rules_file, f"{label}: PrometheusRule differs from files/prometheus-rules.yaml")
    alerts = {r["alert"] for g in rules_file["groups"] for r in g["rules"]}
    for needed in ("FlexInferQueueSaturated", "FlexInferActivationFailures", "FlexInferBackendDown", "FlexInferKVCachePressure"):
        check(needed in alerts, f"{label}: alert {needed} missing")
    dash = [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]
    if check(len(dash) == 1, f"{label}: dashboard ConfigMap missing"):
        board = json.loads(next(iter(dash[0]["data"].values())))
        check(len(board["panels"]) >= 8, f"{label}: dashboard has {len(board['panels'])} panels")
    monitored = {m["metadata"]["name"] for m in by_kind(objects, "ServiceMonitor")}
    check(expect["proxy"] in monitored, f"{label}: gateway ServiceMonitor missing")


def rules_text(role):
    return json.dumps(role.get("rules", []))


def check_rbac(objects, label, expect):
    prefix = expect["fullname"] + "-"
    sas = {o["metadata"]["name"] for o in by_kind(objects, "ServiceAccount")}
    roles = {(o["kind"], o["metadata"]["name"]): o for o in by_kind(objects, "ClusterRole") + by_kind(objects, "Role")}
    bindings = by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding")
    check(sas == {prefix + c for c in expect["components"]}, f"{label}: ServiceAccounts {sorted(sas)}")
    for sa in sas:
        component = sa[len(prefix):]
        bound = [b for b in bindings if any(s["name"] == sa for s in b["subjects"])]
        check(bound, f"{label}: ServiceAccount {sa} is bound to nothing")
        for b in bound:
            ref = b["roleRef"]["name"]
            allowed = {sa} | SYSTEM_ROLES.get(component, set())
            check(ref in allowed, f"{label}: {sa} is bound to {ref}, not its own role")
    for b in bindings:
        name = f"{label}: {b['kind']}/{b['metadata']['name']}"
        check(len(b["subjects"]) == 1, f"{name}: {len(b['subjects'])} subjects")
        s = b["subjects"][0]
        check(s["kind"] == "ServiceAccount" and s["namespace"] == NAMESPACE, f"{name}: subject {s}")
        ref = b["roleRef"]["name"]
        if ref.startswith(prefix):
            check(s["name"] == ref, f"{name}: role {ref} bound to {s['name']}")
            check((b["roleRef"]["kind"], ref) in roles, f"{name}: role {ref} not rendered")
    all_roles = by_kind(objects, "ClusterRole") + by_kind(objects, "Role")
    for role in all_roles:
        kind, name = role["kind"], role["metadata"]["name"]
        check(name.startswith(prefix) and name[len(prefix):] in expect["components"], f"{label}: {kind}/{name} belongs to no component")
        for rule in role.get("rules", []):
            for field in ("verbs", "resources", "apiGroups"):
                check("*" not in rule.get(field, []), f"{label}: {kind}/{name} has a wildcard in {field}")
            check(
                not {"escalate", "bind", "impersonate"} & set(rule.get("verbs", [])),
                f"{label}: {kind}/{name} grants escalate/bind/impersonate",
            )
    check_secret_grants(all_roles, label, expect, peer_secret(objects, expect))
    check_global_gateway_role(all_roles, bindings, label, expect)
    # Per-component shape: what each one must not be able to do (the Rust
    # test compares every grant with the code's tables).
    def granted(component, kind=None):
        return {(r, v) for role in all_roles if role["metadata"]["name"] == prefix + component
                and kind in (None, role["kind"])
                for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    check(granted("agent") <= {("nodes", "get"), ("nodes", "patch"), ("pods", "list")},
          f"{label}: agent rules {sorted(granted('agent'))}")
    check({v for _, v in granted("sched")} <= {"list", "watch"}, f"{label}: extender verbs {granted('sched')}")
    gateway = roles.get(("ClusterRole", prefix + "gateway"))
    check((gateway is None) == bool(expect.get("global")), f"{label}: gateway ClusterRole {'rendered' if gateway else 'missing'}")
    if not expect.get("global") and not expect["embedded"]:
        # The Gateway API controller writes one thing: its Gateways'
        # Services, in the release namespace.
        own = {(r, v) for role in all_roles if role["metadata"]["name"] == prefix + "gateway"
               and role["kind"] == "Role" and role["metadata"]["namespace"] == NAMESPACE
               for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
        verbs = {v for r, v in granted("gateway") if (r, v) not in own or r != "services"}
        check(not verbs & {"create", "update", "delete"}, f"{label}: gateway without operator has {verbs}")
    # Writes outside the watched namespaces: none, unless every namespace
    # is watched.
    if not expect["all_namespaces"]:
        writes = {"create", "update", "patch", "delete"}
        for role in by_kind(objects, "ClusterRole"):
            for rule in role["rules"]:
                # A Gateway API implementation reports on the Gateways,
                # routes and pools of every namespace: their status only.
                gateway_status = {"gatewayclasses/status", "gateways/status", "httproutes/status",
                                  "inferencepools/status"}
                cluster_scoped = set(rule["resources"]) <= {"nodes", "customresourcedefinitions"} | gateway_status
                check(cluster_scoped or not writes & set(rule["verbs"]),
                      f"{label}: ClusterRole/{role['metadata']['name']} writes {rule['resources']} in every namespace")
    leases = {role["metadata"]["name"][len(prefix):] for role in all_roles
              if role["kind"] == "Role" and role["metadata"]["namespace"] == NAMESPACE and "leases" in rules_text(role)}
    check(leases == set(expect["leases"]), f"{label}: Lease grants for {sorted(leases)}, expected {sorted(expect['leases'])}")
    # The agent may write only its own Node.
    policies = by_kind(objects, "ValidatingAdmissionPolicy")
    if "agent" in expect["components"]:
        agent_user = f"system:serviceaccount:{NAMESPACE}:{prefix}agent"
        check(len(policies) == 1 and agent_user in policies[0]["spec"]["matchConditions"][0]["expression"]
              and "authentication.kubernetes.io/node-name" in policies[0]["spec"]["validations"][0]["expression"],
              f"{label}: no ValidatingAdmissionPolicy keeps the agent to its own Node")
        bindings = by_kind(objects, "ValidatingAdmissionPolicyBinding")
        check(len(bindings) == 1 and policies and bindings[0]["spec"]["policyName"] == policies[0]["metadata"]["name"]
              and bindings[0]["spec"]["validationActions"] == ["Deny"], f"{label}: the agent's policy is not bound (Deny)")
    else:
        check(not policies, f"{label}: an admission policy without the agent")
    # Workloads run as their own component's ServiceAccount.
    for w in by_kind(objects, "Deployment") + by_kind(objects, "DaemonSet"):
        component = w["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
        sa = pod_spec(w)["serviceAccountName"]
        wanted = {"gateway": "gateway", "operator": "operator", "scheduler-extender": "sched",
                  "agent": "agent", "kube-scheduler": "scheduler"}[component]
        check(sa == prefix + wanted, f"{label}: {w['metadata']['name']} runs as {sa}")


def peer_secret(objects, expect):
    """The gateway replicas' peer Secret as the gateway's env names it:
    (name, generated), or None with sharing off."""
    gw = find(objects, "Deployment", expect["proxy"])
    if gw is None:
        return None
    env = {e["name"]: e.get("value") for e in pod_spec(gw)["containers"][0].get("env", [])}
    name = env.get("PROXY_ROUTING_PEER_SECRET_NAME")
    return (name, env.get("PROXY_ROUTING_PEER_SECRET_GENERATE") == "true") if name else None


def check_secret_grants(all_roles, label, expect, peers=None):
    """No role may touch Secrets unless a feature that reads them is on
    (expect["secrets"]: the component running the controllers and the
    namespaces of its Roles, or None for a ClusterRole with every namespace
    watched); then only that component, only `get`, and every rule on
    Secrets grants nothing else. The one exception is the gateway's peer
    Secret (`peers`: its name and whether the gateway generates it): get,
    list and watch of that one Secret by name in the release namespace's
    gateway Role, and patch when generated."""
    if peers is not None:
        all_roles = check_peer_secret_grants(all_roles, label, expect, peers)
    prefix = expect["fullname"] + "-"
    wanted = expect.get("secrets")
    where = set()
    for role in all_roles:
        kind, name = role["kind"], role["metadata"]["name"]
        for rule in role.get("rules", []):
            if "secrets" not in rule.get("resources", []):
                continue
            if not check(wanted is not None, f"{label}: {kind}/{name} grants Secrets while no feature needs them"):
                continue
            check(name == prefix + wanted["component"], f"{label}: {kind}/{name} grants Secrets, not the controllers' {wanted['component']}")
            check(rule.get("verbs") == ["get"], f"{label}: {kind}/{name} grants {rule.get('verbs')} on Secrets (only get)")
            check(rule.get("resources") == ["secrets"] and rule.get("apiGroups") == [""],
                  f"{label}: {kind}/{name} mixes Secrets with other resources: {rule}")
            where.add(role["metadata"].get("namespace") if kind == "Role" else None)
    if wanted is not None:
        expected = set(wanted["namespaces"]) if wanted["namespaces"] is not None else {None}
        check(where == expected, f"{label}: Secrets readable in {where}, expected {expected}")


def check_peer_secret_grants(all_roles, label, expect, peers):
    """Checks the rules on the peer Secret and returns the roles without
    them."""
    name, generated = peers
    gateway = expect["fullname"] + "-gateway"
    found = set()
    rest = []
    for role in all_roles:
        kept = []
        for rule in role.get("rules", []):
            if rule.get("resourceNames") != [name] or "secrets" not in rule.get("resources", []):
                kept.append(rule)
                continue
            where = f"{label}: {role['kind']}/{role['metadata']['name']}"
            check(role["kind"] == "Role" and role["metadata"]["name"] == gateway
                  and role["metadata"].get("namespace") == NAMESPACE,
                  f"{where} grants the peer Secret outside the gateway's release-namespace Role")
            check(rule.get("resources") == ["secrets"] and rule.get("apiGroups") == [""],
                  f"{where} mixes the peer Secret with other resources: {rule}")
            found.update(rule.get("verbs", []))
        rest.append({**role, "rules": kept})
    wanted = {"get", "list", "watch"} | ({"patch"} if generated else set())
    check(found == wanted, f"{label}: the gateway may {sorted(found)} its peer Secret, expected {sorted(wanted)}")
    return rest


def check_global_gateway_role(all_roles, bindings, label, expect):
    """In global mode the gateway holds exactly GLOBAL_RBAC_RULES, in a Role
    of the GlobalProxy's namespace, restricted to that object."""
    name = expect["fullname"] + "-gateway"
    roles = [r for r in all_roles if r["kind"] == "Role" and r["metadata"]["name"] == name]
    if not expect.get("global"):
        return
    namespace, _, obj = expect["global"].partition("/")
    if not check(len(roles) == 1, f"{label}: {len(roles)} gateway Roles in global mode"):
        return
    role = roles[0]
    check(role["metadata"]["namespace"] == namespace, f"{label}: global gateway Role in {role['metadata']['namespace']}")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    check(granted == {("ai.flexinfer", "globalproxies", "list"), ("ai.flexinfer", "globalproxies", "watch"),
                      ("ai.flexinfer", "globalproxies/status", "patch")}, f"{label}: global gateway rules {sorted(granted)}")
    check(all(rule.get("resourceNames") == [obj] for rule in role["rules"]), f"{label}: global gateway rules not restricted to {obj}")
    bound = [b for b in bindings if b["kind"] == "RoleBinding" and b["roleRef"]["name"] == name]
    check(len(bound) == 1 and bound[0]["metadata"]["namespace"] == namespace, f"{label}: global gateway RoleBinding")


def check_models(objects, label, expect):
    models = by_kind(objects, "Model")
    check(sorted(m["metadata"]["name"] for m in models) == sorted(expect["models"]), f"{label}: Models {[m['metadata']['name'] for m in models]}")


# ---------------------------------------------------------------------------


def rbac_settings(defaults, values, label, expect):
    """What decides each component's grants for one values set: the
    watched namespaces (None: all), the release namespace, the component
    running the controllers and the settings that add grants (the names of
    flexinfer_crds::rbac::When), per component."""
    v = merge(copy.deepcopy(defaults), copy.deepcopy(values or {}))
    operator = v["operator"]["enabled"]
    controllers = "operator" if operator else (
        "gateway" if v["gateway"]["embeddedOperator"] and not v["gateway"]["global"]["enabled"] else None)
    replicas = v["operator"]["replicas"] if controllers == "operator" else v["gateway"]["replicas"]
    federation = operator and v["operator"]["federation"]["enabled"]
    features = {component: [] for component in expect["components"]}
    if controllers:
        features[controllers] += [name for name, on in [
            # The chart always elects a leader where the controllers run.
            ("LeaderElection", True),
            ("Federation", federation),
            ("ReadsSecrets", federation or v["catalog"]["registryCredentials"]),
        ] if on]
    ext = v["scheduler"]["extender"]
    if "sched" in features:
        features["sched"] += [name for name, on in [
            ("NodeCache", ext["nodeCache"]), ("FairShare", ext["tenantFairShare"]["enabled"])] if on]
    if "agent" in features:
        features["agent"] += ["KvCache"] if v["agent"]["kvCache"] else []
    gw = v["gateway"]
    if "gateway" in features and gw["peers"]["enabled"] and not gw["global"]["enabled"]:
        features["gateway"] += ["PeerSecret"] + ([] if gw["peers"]["existingSecret"] else ["PeerSecretGenerate"])
    if "gateway" in features and gw["gatewayApi"]["enabled"] and not gw["global"]["enabled"]:
        features["gateway"] += ["GatewayApi"]
    watched = None if v["watch"]["allNamespaces"] else (v["watch"]["namespaces"] or [NAMESPACE])
    return {
        "values": label,
        "release": NAMESPACE,
        "watched": watched,
        "controllers": controllers,
        "global": expect.get("global"),
        "lease": v["leaderElection"]["leaseName"],
        "features": features,
    }


def summarize(objects, label):
    """Environment variables and flags of every FlexInfer container, for
    the comparison with the binaries' command lines."""
    out = []
    for w in by_kind(objects, "Deployment") + by_kind(objects, "DaemonSet"):
        for c in pod_spec(w)["containers"]:
            image = c["image"].rsplit("/", 1)[-1].split(":")[0]
            if not image.startswith("flexinfer-") and "gateway" not in c["image"]:
                continue
            binary = "flexinfer-gateway" if c["name"] == "gateway" else image
            out.append({
                "values": label,
                "workload": w["metadata"]["name"],
                "binary": binary,
                # Values from the downward API or Secrets are null.
                "env": {e["name"]: e.get("value") for e in c.get("env", [])},
                "args": c.get("args", []),
            })
    return out


def check_schema_rejects_mistakes(chart_values):
    chart = Chart.load(CHART)
    for bad, why in [
        ({"gateway": {"replica": 2}}, "a misspelt key"),
        ({"gateway": {"replicas": "two"}}, "a string replica count"),
        ({"gateway": {"logFormat": "xml"}}, "an unknown log format"),
        ({"gateway": {"activation": {"queueTimeout": "soon"}}}, "a malformed duration"),
        ({"models": {"m": {"annotations": {}}}}, "a model without spec"),
        ({"operator": {"federation": {"clusterFailureThreshold": 0}}}, "a zero failure threshold"),
        ({"gateway": {"global": {"probeInterval": "often"}}}, "a malformed probe interval"),
        ({"catalog": {"registryCredentials": "yes"}}, "a string switch"),
    ]:
        values = merge(copy.deepcopy(chart_values), bad)
        try:
            chart.validate_schema(values)
            fail(f"values.schema.json accepts {why}: {bad}")
        except helm_python.HelmError:
            pass


def check_refused_combinations():
    """Values the binaries would refuse, or that would grant what nothing
    uses, fail the rendering with a message."""
    chart = Chart.load(CHART)
    for bad, why in [
        ({"operator": {"federation": {"enabled": True}}}, "federation without the standalone operator"),
        ({"gateway": {"global": {"enabled": True}}}, "a global gateway with the embedded operator"),
    ]:
        try:
            chart.render(bad, name=RELEASE, namespace=NAMESPACE, is_install=True)
            fail(f"the chart renders {why}: {bad}")
        except helm_python.HelmError:
            pass


def merge(base, override):
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def check_values_documented():
    """Every value of values.yaml is described: a leaf has a comment right
    above it or above one of its enclosing keys (resources.requests.cpu is
    covered by the comment on resources)."""
    with open(os.path.join(CHART, "values.yaml"), encoding="utf-8") as f:
        lines = f.read().splitlines()

    def indent(line):
        return len(line) - len(line.lstrip())

    def commented(index):
        return index > 0 and lines[index - 1].strip().startswith("#")

    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or ":" not in stripped:
            continue
        key = stripped.lstrip("- ").partition(":")[0]
        j, level, documented = index, indent(line), commented(index)
        while not documented and level > 0:
            j -= 1
            while j >= 0 and (not lines[j].strip() or lines[j].strip().startswith("#") or indent(lines[j]) >= level):
                j -= 1
            if j < 0:
                break
            level = indent(lines[j])
            documented = commented(j)
        check(documented, f"values.yaml line {index + 1}: {key} has no comment")


def doc_examples():
    """FlexInfer objects in the documentation's examples: ```yaml blocks and
    shell heredocs (<<'EOF' ... EOF) of docs/*.md; sketches without a spec
    are skipped."""
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
        blocks += [b.split("\nEOF", 1)[0] for b in text.split("<<'EOF'\n")[1:]]
        for block in blocks:
            try:
                docs = list(yaml.safe_load_all(block))
            except yaml.YAMLError:
                continue
            for doc in docs:
                if (isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("ai.flexinfer/")
                        and "spec" in doc):
                    found.append((os.path.relpath(path, ROOT), doc))
    return found


def check_validators_bite(schemas):
    """The validators reject known-bad objects (so a pass means something)."""
    global FAILURES
    saved, FAILURES = FAILURES, []
    bad_deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "replicas": 1,
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "i", "bogusField": 1}]}}},
    }
    kube_valid(bad_deployment, "self-test")
    unknown_field = len(FAILURES)
    bad_model = {"apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model", "metadata": {"name": "m"},
                 "spec": {"backend": "vllm", "source": "hf://x/y", "notAField": True}}
    validate_custom_resource(bad_model, "self-test", schemas)
    model_unknown = len(FAILURES) - unknown_field
    wrong_type = {"apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model", "metadata": {"name": "m"},
                  "spec": {"backend": "vllm", "source": "hf://x/y", "gpu": {"count": "two"}}}
    validate_custom_resource(wrong_type, "self-test", schemas)
    model_type = len(FAILURES) - unknown_field - model_unknown
    FAILURES = saved
    check(unknown_field >= 1, "self-test: kubernetes-validate accepted an unknown container field")
    check(model_unknown >= 1, "self-test: the Model schema accepted an unknown spec field")
    check(model_type >= 1, "self-test: the Model schema accepted a string GPU count")


def cases(chart):
    """(label, values, expectations) of every rendered values set."""
    def values_file(name):
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            return yaml.safe_load(f)

    app = chart.metadata["appVersion"]
    return [
        ("defaults", None, {
            "fullname": "flexinfer", "proxy": "flexinfer-proxy", "agent": "flexinfer-agent",
            "sched": "flexinfer-sched", "scheduler": "flexinfer-scheduler",
            "gateway_image": f"ghcr.io/flexinfer/flexinfer-gateway:{app}",
            "embedded": True, "replicas": 2, "all_namespaces": False, "namespaces": NAMESPACE,
            "service_port": 80, "auth": None, "scheduler_enabled": False,
            "scheduler_name": "flexinfer-scheduler", "monitoring": False,
            "components": {"gateway", "agent"}, "models": [], "leases": ["gateway"],
            "controllers": {"workload": "flexinfer-proxy", "scheduler_name": None,
                            "flashload_image": f"ghcr.io/flexinfer/flexinfer-flashload:{app}",
                            "quantizer_image": None, "leader_elect": True,
                            "lease": "flexinfer-operator", "image_overrides": {}},
        }),
        ("values-all.yaml", values_file("values-all.yaml"), {
            "fullname": "flexinfer-fi", "proxy": "flexinfer-fi-proxy", "agent": "flexinfer-fi-agent",
            "sched": "flexinfer-fi-sched", "scheduler": "flexinfer-fi-scheduler",
            "gateway_image": "registry.example.com/custom/gateway:1.2.4",
            "embedded": False, "replicas": 3, "all_namespaces": False, "namespaces": "team-a,team-b",
            "service_port": 443, "auth": {"name": "flexinfer-api-keys", "key": "keys"},
            "scheduler_enabled": True, "scheduler_name": "gpu-aware", "monitoring": True,
            "kube_scheduler": {"image": "registry.k8s.io/kube-scheduler:v1.32.4",
                               "priority": "flexinfer-critical", "auth_reader": True},
            "components": {"gateway", "operator", "sched", "agent", "scheduler", "uninstall"},
            "models": ["qwen3-0-6b", "qwen3-8b-awq"], "leases": ["operator", "scheduler"],
            # The release's Models are deleted before the operator goes.
            "uninstall": {"team-a": ["models.ai.flexinfer/qwen3-0-6b"],
                          NAMESPACE: ["models.ai.flexinfer/qwen3-8b-awq"]},
            "operator": {"replicas": 2, "watch_namespace": None, "lease": "flexinfer-controllers",
                         "federation": 3},
            "controllers": {"workload": "flexinfer-fi-operator", "scheduler_name": "gpu-aware",
                            "flashload_image": "registry.example.com/custom/flashload:1.2.5",
                            "quantizer_image": "registry.example.com/tools/quantizer:2025.1",
                            "leader_elect": True, "lease": "flexinfer-controllers",
                            "image_overrides": {}},
            # catalog.registryCredentials and federation: a Role per watched namespace.
            "secrets": {"component": "operator", "namespaces": ["team-a", "team-b"]},
        }),
        ("values-ha.yaml", values_file("values-ha.yaml"), {
            "fullname": "flexinfer", "proxy": "flexinfer-proxy", "agent": "flexinfer-agent",
            "sched": "flexinfer-sched", "scheduler": "flexinfer-scheduler",
            "gateway_image": f"ghcr.io/flexinfer/flexinfer-gateway:{app}",
            "embedded": True, "replicas": 3, "all_namespaces": True, "namespaces": "",
            "service_port": 80, "auth": None, "scheduler_enabled": True,
            "scheduler_name": "flexinfer-scheduler", "monitoring": False,
            # The cluster's kube-scheduler, no priority class and nothing in
            # kube-system outside kube-system (managed clusters refuse them).
            "kube_scheduler": {"image": None, "priority": None, "auth_reader": False},
            "components": {"gateway", "sched", "agent", "scheduler"}, "models": [],
            "leases": ["gateway", "scheduler"],
            # The embedded controllers send model pods to the FlexInfer
            # scheduler and get the operator's images and operator.env.
            "controllers": {"workload": "flexinfer-proxy", "scheduler_name": "flexinfer-scheduler",
                            "flashload_image": f"ghcr.io/flexinfer/flexinfer-flashload:{app}",
                            "quantizer_image": "registry.example.com/flexinfer/quantizer:0.3",
                            "leader_elect": True, "lease": "flexinfer-operator",
                            "image_overrides": {"DEFAULT_VLLM_IMAGE": "registry.example.com/vllm/vllm-openai:v0.9.1"}},
        }),
        ("values-global.yaml", values_file("values-global.yaml"), {
            "fullname": "flexinfer", "proxy": "flexinfer-proxy", "agent": "flexinfer-agent",
            "sched": "flexinfer-sched", "scheduler": "flexinfer-scheduler",
            "gateway_image": f"ghcr.io/flexinfer/flexinfer-gateway:{app}",
            "embedded": False, "replicas": 2, "all_namespaces": True, "namespaces": "",
            "service_port": 80, "auth": None, "scheduler_enabled": False,
            "scheduler_name": "flexinfer-scheduler", "monitoring": False,
            "components": {"gateway", "operator"}, "models": [], "leases": ["operator"],
            "global": "fleet/edge", "member_token": {"name": "member-gateway-key", "key": "key"},
            "operator": {"replicas": 1, "watch_namespace": None, "lease": "flexinfer-operator",
                         "federation": 2},
            "controllers": {"workload": "flexinfer-operator", "scheduler_name": None,
                            "flashload_image": f"ghcr.io/flexinfer/flexinfer-flashload:{app}",
                            "quantizer_image": None, "leader_elect": True,
                            "lease": "flexinfer-operator", "image_overrides": {}},
            # Every namespace watched: get on Secrets in the ClusterRole.
            "secrets": {"component": "operator", "namespaces": None},
        }),
    ]


def rbac_only() -> int:
    """The RBAC structure checks alone, for every values set."""
    chart = Chart.load(CHART)
    for label, values, expect in cases(chart):
        check_rbac(render(values, label), label, expect)
    if FAILURES:
        print(f"{len(FAILURES)} RBAC check(s) failed:")
        for message in FAILURES:
            print(f"  - {message}")
        return 1
    print("RBAC OK: one ServiceAccount per component, each bound only to its own roles; "
          "Secrets only get, only with the features that read them")
    return 0


def render_only(out: str, values: dict) -> int:
    """Renders the chart as `helm install` would and writes the objects
    (the full check above lints and validates the same templates)."""
    chart = Chart.load(CHART)
    manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(objects, f, indent=1)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", help="write the container summary JSON here")
    parser.add_argument("--only", choices=["all", "rbac"], default="all",
                        help="rbac: render and run the RBAC checks only")
    parser.add_argument("--render", metavar="OUT",
                        help="only render (with --values) and write the objects as JSON here")
    parser.add_argument("--values", default="{}",
                        help="values for --render, as a JSON object")
    args = parser.parse_args()
    if args.render:
        return render_only(args.render, json.loads(args.values))
    if args.only == "rbac":
        return rbac_only()

    schemas = load_crd_schemas()
    check_validators_bite(schemas)
    for path in sorted(glob.glob(os.path.join(ROOT, "crds", "examples", "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    validate_custom_resource(doc, os.path.relpath(path, ROOT), schemas)

    examples = doc_examples()
    check(len(examples) >= 1, "no FlexInfer object found in the docs' examples")
    for where, doc in examples:
        validate_custom_resource(doc, where, schemas)

    chart = Chart.load(CHART)
    check(chart.metadata["appVersion"] == chart.values["image"]["tag"] or chart.values["image"]["tag"] == "",
          "image.tag must default to the chart appVersion")
    check_schema_rejects_mistakes(chart.values)
    check_refused_combinations()
    check_values_documented()
    check_value_variants()

    summary = []
    controllers = []
    roles = []
    settings = []
    counts = {}
    for label, values, expect in cases(chart):
        objects = render(values, label)
        counts[label] = len(objects)
        for obj in objects:
            where = f"{label}: {obj['__template__']}"
            api_version = obj.get("apiVersion", "")
            if api_version.startswith("ai.flexinfer/"):
                validate_custom_resource(strip(obj), where, schemas)
            elif api_version.startswith("monitoring.coreos.com/"):
                validate_monitoring(obj, where)
            elif api_version == "gateway.networking.k8s.io/v1":
                validate_gateway_class(obj, where)
            else:
                kube_valid(strip(obj), where)
            check(obj["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "flexinfer",
                  f"{where}: {obj['kind']}/{obj['metadata'].get('name')} lacks the common labels")
        names = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
        check(len(names) == len(set(names)), f"{label}: duplicate objects")
        check_workloads(objects, values, label)
        check_gateway(objects, values, label, expect)
        check_agent(objects, label, expect)
        check_operator(objects, label, expect)
        check_controllers(objects, label, expect)
        check_scheduler(objects, label, expect)
        check_monitoring(objects, label, expect)
        check_uninstall(objects, label, expect)
        check_rbac(objects, label, expect)
        check_models(objects, label, expect)
        summary.extend(summarize(objects, label))
        controllers.append({"values": label, **expect["controllers"]})
        settings.append(rbac_settings(chart.values, values, label, expect))
        for role in by_kind(objects, "ClusterRole") + by_kind(objects, "Role"):
            roles.append({
                "values": label,
                "kind": role["kind"],
                "namespace": role["metadata"].get("namespace"),
                "component": role["metadata"]["name"][len(expect["fullname"]) + 1:],
                "embeddedOperator": expect["embedded"],
                "federation": bool(expect.get("operator", {}).get("federation")),
                "global": bool(expect.get("global")),
                "rules": role["rules"],
            })

    if args.summary:
        with open(args.summary, "w", encoding="utf-8") as f:
            json.dump({"containers": summary, "controllers": controllers, "roles": roles,
                       "rbac": settings,
                       "objects": counts}, f, indent=1)
    if FAILURES:
        print(f"{len(FAILURES)} chart check(s) failed:")
        for message in FAILURES:
            print(f"  - {message}")
        return 1
    print(f"chart OK: {counts} objects rendered and validated against Kubernetes {KUBE_VERSION}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
