{{/*
RBAC rules of each component, one named template per component. Each
component's rules live in exactly one ClusterRole named
"<fullname>-<component>" (rbac.yaml), so that they can be compared with the
API calls the component's code makes. Verbs are the ones the code uses:
reflectors need list + watch, server-side apply needs patch, and so on.
*/}}

{{/* Controllers (standalone operator, or the gateway's embedded operator). */}}
{{- define "flexinfer.rules.operator" -}}
{{- $federation := include "flexinfer.federation" . }}
# Reconciled custom resources (watched, finalizers added and removed).
- apiGroups: ["ai.flexinfer"]
  resources:
    - models
    - modeldeployments
    - modelcaches
    - gpugroups
    - loraadapters
  verbs: ["get", "list", "watch", "update", "patch"]
# Status written with server-side apply.
- apiGroups: ["ai.flexinfer"]
  resources:
    - models/status
    - modeldeployments/status
    - modelcaches/status
    - gpugroups/status
    - loraadapters/status
  verbs: ["get", "update", "patch"]
- apiGroups: ["ai.flexinfer"]
  resources:
    - models/finalizers
    - modeldeployments/finalizers
    - modelcaches/finalizers
    - gpugroups/finalizers
  verbs: ["update"]
# ModelCatalog controller (operator/src/catalog/controller.rs): watches the
# catalogs, re-reads one before each sync and writes its status with
# server-side apply.
- apiGroups: ["ai.flexinfer"]
  resources: ["modelcatalogs"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["ai.flexinfer"]
  resources: ["modelcatalogs/status"]
  verbs: ["patch"]
{{- if $federation }}
# Federation controllers (operator.federation.enabled; operator/src/controllers/
# cluster.rs and federated_model.rs): Clusters are watched, re-read before a
# probe and listed per namespace for placement; FederatedModels are watched,
# re-read and carry a finalizer (a JSON patch); both write their status with
# server-side apply. Calls to the member clusters go through each Cluster's
# kubeconfig, not through this role.
- apiGroups: ["ai.flexinfer"]
  resources: ["clusters"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["ai.flexinfer"]
  resources: ["federatedmodels"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["ai.flexinfer"]
  resources: ["clusters/status", "federatedmodels/status"]
  verbs: ["patch"]
{{- end }}
# Owned workloads: model Deployments, Services, cache PVCs, prefetch and
# cleanup Jobs, benchmark ConfigMaps.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "persistentvolumeclaims", "configmaps"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# Model pods: status for the phase, failed pods pruned.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "delete"]
# GPU detection reads the labels the node agent writes.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Start-up checks that the FlexInfer CRDs are installed: the controllers'
# (REQUIRED_CRDS), the ModelCatalog controller's (it stays off when it may
# not read its CRD) and, with federation, the federation controllers'.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  resourceNames:
    - models.ai.flexinfer
    - modeldeployments.ai.flexinfer
    - modelcaches.ai.flexinfer
    - gpugroups.ai.flexinfer
    - loraadapters.ai.flexinfer
    - modelcatalogs.ai.flexinfer
    {{- if $federation }}
    - clusters.ai.flexinfer
    - federatedmodels.ai.flexinfer
    {{- end }}
  verbs: ["get"]
# Leader election: the Lease is created once, then renewed by name.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: [{{ .Values.leaderElection.leaseName | quote }}]
  verbs: ["get", "update", "patch"]
{{- end }}

{{/* Secrets, for the component that runs the controllers, only while a
feature that reads them is on (flexinfer.secretReader). Only `get`: the
controllers read Secrets by name and never list or watch them. Bound per
watched namespace (a Role in each), or cluster-wide with
watch.allNamespaces. */}}
{{- define "flexinfer.rules.secrets" -}}
{{- if .Values.catalog.registryCredentials }}
# catalog.registryCredentials: the ModelCatalog controller reads the Secret
# named by a registry's secretRef, in the catalog's namespace
# (operator/src/catalog/controller.rs).
{{- end }}
{{- if include "flexinfer.federation" . }}
# operator.federation.enabled: the Cluster controller builds each member's
# client from the kubeconfig Secret named by the Cluster's spec.secretRef, in
# the Cluster's namespace (operator/src/controllers/member_clients.rs).
{{- end }}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}

{{/* The gateway's own needs in Kubernetes mode: exactly the rules of
gateway/src/kube/rbac.rs (RBAC_RULES). */}}
{{- define "flexinfer.rules.gateway" -}}
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
# Pods on spot nodes about to be reclaimed are skipped.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
# Service labels (label groups) from the models' Services.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["list", "watch"]
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

{{/* Scheduler extender: reflectors only. */}}
{{- define "flexinfer.rules.sched" -}}
# Benchmark results (tokens/s per device class).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["list", "watch"]
{{- if .Values.scheduler.extender.nodeCache }}
# Node cache (nodeCacheCapable: true).
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
{{- end }}
{{- if .Values.scheduler.extender.tenantFairShare.enabled }}
# Tenant fair share counts each tenant's GPU pods.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- end }}
{{- end }}

{{/* Node agent: reads and patches its own Node. */}}
{{- define "flexinfer.rules.agent" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "patch"]
{{- if .Values.agent.kvCache }}
# KV-cache usage: finds the model pods on its node.
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
