{{/*
RBAC rules of each component, split by where they are granted. They are
exactly the API-call tables kept next to each component's code:
operator/src/rbac.rs (CONTROLLER_GRANTS), gateway/src/kube/rbac.rs
(RBAC_RULES), gateway/src/global/watch.rs (GLOBAL_RBAC_RULES),
sched-ext/src/rbac.rs and node/src/rbac.rs (GRANTS);
docs/gen/tests/docs/helm_chart.rs fails on a missing and on an unused
grant. rbac.yaml places them:

- ".cluster": cluster-scoped resources, in the component's ClusterRole;
- ".watched": objects in the watched namespaces, in a Role in each (the
  ClusterRole with watch.allNamespaces);
- ".reflected": the list and watch of reflectors that cover one namespace or
  all (the controllers, the extender), in the Role of the watched namespace
  when there is one, in the ClusterRole otherwise;
- ".own": the component's own objects (the leader-election Lease), in a Role
  in the release namespace.
*/}}

{{/* Controllers (standalone operator, or the gateway's embedded operator):
reflectors on the reconciled and owned kinds. */}}
{{- define "flexinfer.rules.operator.reflected" -}}
- apiGroups: ["ai.flexinfer"]
  resources:
    - models
    - modeldeployments
    - gpugroups
    - modelcaches
    - loraadapters
    - modelcatalogs
    {{- if include "flexinfer.federation" . }}
    - clusters
    - federatedmodels
    {{- end }}
  verbs: ["list", "watch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["list", "watch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["list", "watch"]
{{- end }}

{{/* Controllers: calls on objects in the watched namespaces. Call with
(dict "root" $ "secrets" true) when this component reads Secrets. */}}
{{- define "flexinfer.rules.operator.watched" -}}
{{- $federation := include "flexinfer.federation" .root }}
# Each reconcile re-reads its object; Models and LoRAAdapters carry a
# finalizer (a JSON patch); ModelDeployments are scaled with a merge patch.
- apiGroups: ["ai.flexinfer"]
  resources:
    - models
    - modeldeployments
    - loraadapters
    {{- if $federation }}
    - federatedmodels
    {{- end }}
  verbs: ["get", "patch"]
- apiGroups: ["ai.flexinfer"]
  resources:
    - gpugroups
    - modelcaches
    - modelcatalogs
    {{- if $federation }}
    - clusters
    {{- end }}
  verbs: ["get"]
# Status written with server-side apply.
- apiGroups: ["ai.flexinfer"]
  resources:
    - models/status
    - modeldeployments/status
    - gpugroups/status
    - modelcaches/status
    - loraadapters/status
    - modelcatalogs/status
    {{- if $federation }}
    - clusters/status
    - federatedmodels/status
    {{- end }}
  verbs: ["patch"]
# Owners of Deployments, Services, Jobs and PVCs (owner references with
# blockOwnerDeletion, which the OwnerReferencesPermissionEnforcement
# admission plugin allows only with this).
- apiGroups: ["ai.flexinfer"]
  resources:
    - models/finalizers
    - modeldeployments/finalizers
    - modelcaches/finalizers
  verbs: ["update"]
# Owned workloads, read and written with server-side apply (an apply that
# creates is authorised as create too); Deployments and Services deleted
# with their Model, a cache Job when its source changes.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "create", "patch", "delete"]
# Cache PVCs outlive their Model: never deleted.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "create", "patch"]
# A Model's pods: listed (readiness, KV cache), failed ones deleted.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "delete"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if .secrets }}
{{- if .root.Values.catalog.registryCredentials }}
# catalog.registryCredentials: the ModelCatalog controller reads the Secret
# named by a registry's secretRef, in the catalog's namespace.
{{- end }}
{{- if $federation }}
# operator.federation.enabled: the Cluster controller reads the kubeconfig
# Secret named by a Cluster's spec.secretRef, in the Cluster's namespace.
{{- end }}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
{{- end }}

{{/* Controllers: GPU detection watches Nodes (one Node cache); the
start-up check reads the FlexInfer CRDs by name (REQUIRED_CRDS, the
ModelCatalog CRD and, with federation, the federation CRDs). */}}
{{- define "flexinfer.rules.operator.cluster" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  resourceNames:
    - models.ai.flexinfer
    - modeldeployments.ai.flexinfer
    - modelcaches.ai.flexinfer
    - gpugroups.ai.flexinfer
    - loraadapters.ai.flexinfer
    - modelcatalogs.ai.flexinfer
    {{- if include "flexinfer.federation" . }}
    - clusters.ai.flexinfer
    - federatedmodels.ai.flexinfer
    {{- end }}
  verbs: ["get"]
{{- end }}

{{/* Controllers with leader election: the Lease is created once, then
read and renewed (replaced) by name. */}}
{{- define "flexinfer.rules.operator.own" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: [{{ .Values.leaderElection.leaseName | quote }}]
  verbs: ["get", "update"]
{{- end }}

{{/* The gateway replicas' shared secret (gateway/src/peers/secret.rs):
read and watched by name, and patched by name when the gateway generates
it. Granted in the release namespace, on that one Secret only. */}}
{{- define "flexinfer.rules.gateway.peers" -}}
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: [{{ include "flexinfer.peerSecretName" . | quote }}]
  verbs: ["get", "list", "watch"]
{{- if not .Values.gateway.peers.existingSecret }}
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: [{{ include "flexinfer.peerSecretName" . | quote }}]
  verbs: ["patch"]
{{- end }}
{{- end }}

{{/* The gateway's own needs in Kubernetes mode, in the watched namespaces
(one reflector per namespace): the namespaced rules of RBAC_RULES. */}}
{{- define "flexinfer.rules.gateway.watched" -}}
# Routes: reflectors on the model kinds.
- apiGroups: ["ai.flexinfer"]
  resources: ["models", "loraadapters"]
  verbs: ["list", "watch"]
# Activation: lastActiveTime / lastAccessTime, a ModelDeployment's replicas
# (0 -> 1) and the GPUGroup demand annotations.
- apiGroups: ["ai.flexinfer"]
  resources: ["modeldeployments", "gpugroups"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["ai.flexinfer"]
  resources: ["models/status", "modeldeployments/status"]
  verbs: ["patch"]
# Ready endpoints of each model.
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list", "watch"]
# Service labels (label groups) from the models' Services.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["list", "watch"]
{{- end }}

{{/* The gateway in Kubernetes mode: pods on spot nodes about to be
reclaimed are skipped. */}}
{{- define "flexinfer.rules.gateway.cluster" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
{{- end }}

{{/* The gateway's Gateway API controller (gateway.gatewayApi.enabled):
exactly GATEWAY_API_CLUSTER_RULES and GATEWAY_API_OWN_RULES of
gateway/src/kube/rbac.rs. Cluster-wide watches of the kinds routes depend
on, status merge-patched; each Gateway's Service applied and deleted in the
release namespace. */}}
{{- define "flexinfer.rules.gateway.gatewayApi.cluster" -}}
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["gatewayclasses", "gateways", "httproutes"]
  verbs: ["list", "watch"]
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["gatewayclasses/status", "gateways/status", "httproutes/status"]
  verbs: ["patch"]
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["list", "watch"]
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["pods", "namespaces", "services"]
  verbs: ["list", "watch"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list", "watch"]
{{- end }}

{{- define "flexinfer.rules.gateway.gatewayApi.own" -}}
- apiGroups: [""]
  resources: ["services"]
  verbs: ["create", "patch", "delete"]
{{- end }}

{{/* The gateway in global mode: exactly the rules of
gateway/src/global/watch.rs (GLOBAL_RBAC_RULES). It watches its one
GlobalProxy (a field selector on its name, which resourceNames matches) and
writes the object's status with a merge patch. Granted in the GlobalProxy's
namespace only. */}}
{{- define "flexinfer.rules.gatewayGlobal" -}}
- apiGroups: ["ai.flexinfer"]
  resources: ["globalproxies"]
  resourceNames: [{{ .Values.gateway.global.objectName | quote }}]
  verbs: ["list", "watch"]
- apiGroups: ["ai.flexinfer"]
  resources: ["globalproxies/status"]
  resourceNames: [{{ .Values.gateway.global.objectName | quote }}]
  verbs: ["patch"]
{{- end }}

{{/* Scheduler extender: reflectors only. Benchmark results (tokens/s per
device class) and, with tenant fair share, each tenant's GPU pods. */}}
{{- define "flexinfer.rules.sched.reflected" -}}
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["list", "watch"]
{{- if .Values.scheduler.extender.tenantFairShare.enabled }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- end }}
{{- end }}

{{/* Scheduler extender: the Node cache (nodeCacheCapable: true). */}}
{{- define "flexinfer.rules.sched.cluster" -}}
{{- if .Values.scheduler.extender.nodeCache }}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
{{- end }}
{{- end }}

{{/* Node agent: reads and patches its own Node (the ValidatingAdmissionPolicy
of agent-node-policy.yaml refuses writes to any other) and, with
agent.kvCache, lists the model pods on its node. */}}
{{- define "flexinfer.rules.agent.cluster" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "patch"]
{{- if .Values.agent.kvCache }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
{{- end }}
{{- end }}

{{/* Second kube-scheduler: its leader-election Lease (the rest comes from
the system:kube-scheduler and system:volume-scheduler ClusterRoles). */}}
{{- define "flexinfer.rules.scheduler" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: [{{ .Values.scheduler.schedulerName | quote }}]
  verbs: ["get", "update"]
{{- end }}
