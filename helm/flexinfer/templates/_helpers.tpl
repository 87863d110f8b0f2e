{{/*
Chart name, overridable with nameOverride.
*/}}
{{- define "flexinfer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every object name: the release name when it already contains the
chart name (release "flexinfer" gives "flexinfer-proxy"), else
"<release>-<chart>".
*/}}
{{- define "flexinfer.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Name of a component's objects: "<fullname>-<suffix>". Call with
(dict "root" $ "suffix" "proxy").
*/}}
{{- define "flexinfer.componentName" -}}
{{- printf "%s-%s" (include "flexinfer.fullname" .root) .suffix | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The Secret holding the gateway replicas' shared secret: peers.existingSecret,
else the chart's own (rendered without data, filled by the gateway).
*/}}
{{- define "flexinfer.peerSecretName" -}}
{{- .Values.gateway.peers.existingSecret | default (include "flexinfer.componentName" (dict "root" . "suffix" "proxy-peers")) }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "flexinfer.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/part-of: flexinfer
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels of a component. Call with (dict "root" $ "component" "gateway" "app" "flexinfer-proxy").
The "app" label keeps the names of the original chart (app: flexinfer-proxy).
*/}}
{{- define "flexinfer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "flexinfer.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
All labels of a component's objects.
*/}}
{{- define "flexinfer.labels" -}}
{{ include "flexinfer.commonLabels" .root }}
{{ include "flexinfer.selectorLabels" . }}
app: {{ .app }}
{{- end }}

{{/*
Image reference of a component. Call with
(dict "root" $ "image" .Values.gateway.image "name" "flexinfer-gateway").
*/}}
{{- define "flexinfer.image" -}}
{{- $repository := .image.repository | default (printf "%s/%s" (trimSuffix "/" .root.Values.image.registry) .name) }}
{{- $tag := .image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}

{{/*
Image pull secrets of every pod.
*/}}
{{- define "flexinfer.imagePullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Namespaces watched by the gateway and operator: the listed ones, else the
release namespace. Empty output means every namespace.
*/}}
{{- define "flexinfer.watchNamespaces" -}}
{{- if not .Values.watch.allNamespaces }}
{{- if .Values.watch.namespaces }}
{{- join "," .Values.watch.namespaces }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Environment variables from a name: value map (sorted by name).
*/}}
{{- define "flexinfer.extraEnv" -}}
{{- range $name, $value := . }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{/*
Pod-level security context.
*/}}
{{- define "flexinfer.podSecurityContext" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/*
Container-level security context.
*/}}
{{- define "flexinfer.securityContext" -}}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
{{- end }}

{{/*
Whether the gateway's embedded controllers elect a leader: always when they
run, whatever the replica count, since a rolling update (maxSurge) runs an
old and a new pod side by side and both would reconcile.
*/}}
{{- define "flexinfer.gatewayLeaderElect" -}}
{{- if .Values.gateway.embeddedOperator }}true{{ end }}
{{- end }}

{{/*
The cluster's Kubernetes version as an image tag, vX.Y.Z: .Capabilities
.KubeVersion without a vendor suffix (v1.31.4-gke.1256000 -> v1.31.4,
v1.30.2+k3s1 -> v1.30.2, v1.29.3-eks-adc7111 -> v1.29.3).
*/}}
{{- define "flexinfer.kubeVersionTag" -}}
v{{ regexFind "^[0-9]+\\.[0-9]+\\.[0-9]+" (trimPrefix "v" .Capabilities.KubeVersion.Version) }}
{{- end }}

{{/*
Image of the second kube-scheduler: scheduler.kubeScheduler.image when set,
else <repository>:<the cluster's version>, so that it never runs newer than
the API server (kube-scheduler may not be newer than kube-apiserver).
*/}}
{{- define "flexinfer.kubeSchedulerImage" -}}
{{- $ks := .Values.scheduler.kubeScheduler }}
{{- $ks.image | default (printf "%s:%s" $ks.repository (include "flexinfer.kubeVersionTag" .)) }}
{{- end }}

{{/*
Priority class of the second kube-scheduler: scheduler.kubeScheduler
.priorityClassName when set; else system-cluster-critical in kube-system,
the only namespace where managed clusters (GKE's default ResourceQuota)
admit it; else none.
*/}}
{{- define "flexinfer.kubeSchedulerPriorityClass" -}}
{{- $ks := .Values.scheduler.kubeScheduler }}
{{- if $ks.priorityClassName }}{{ $ks.priorityClassName }}
{{- else if eq .Release.Namespace "kube-system" }}system-cluster-critical
{{- end }}
{{- end }}

{{/*
Whether the federation controllers run: only the standalone operator has
--federation.
*/}}
{{- define "flexinfer.federation" -}}
{{- if and .Values.operator.enabled .Values.operator.federation.enabled }}true{{ end }}
{{- end }}

{{/*
The component whose controllers read Secrets ("operator" or "gateway"),
when a feature that reads them is on (catalog.registryCredentials,
operator.federation.enabled); empty otherwise.
*/}}
{{- define "flexinfer.secretReader" -}}
{{- if or .Values.catalog.registryCredentials (include "flexinfer.federation" .) }}
{{- if .Values.operator.enabled }}operator
{{- else if and .Values.gateway.enabled .Values.gateway.embeddedOperator (not .Values.gateway.global.enabled) }}gateway
{{- end }}
{{- end }}
{{- end }}

{{/*
Namespace of the GlobalProxy the gateway follows in global mode.
*/}}
{{- define "flexinfer.globalNamespace" -}}
{{- .Values.gateway.global.objectNamespace | default .Release.Namespace }}
{{- end }}

{{/*
Environment of the container that runs the controllers: the standalone
operator, or the gateway with gateway.embeddedOperator. Both binaries read
these variables through the same controller options (--scheduler-name,
--flash-loader-image, --quantizer-image, --federation), so the controllers
get the same settings wherever they run. Ends with operator.env (the
backend catalog's image overrides such as DEFAULT_VLLM_IMAGE), less the
names in "except" (the container's own extra environment, which it renders
itself). Call with (dict "root" $ "except" .Values.gateway.env).
*/}}
{{- define "flexinfer.controllerEnv" -}}
{{- $values := .root.Values }}
{{- if $values.scheduler.enabled }}
# Model pods are placed by the FlexInfer scheduler.
- name: FLEXINFER_SCHEDULER_NAME
  value: {{ $values.scheduler.schedulerName | quote }}
{{- end }}
{{- if include "flexinfer.federation" .root }}
# Federation: Cluster and FederatedModel controllers (the role then grants
# get on the Cluster objects' kubeconfig Secrets).
- name: FLEXINFER_FEDERATION
  value: "true"
- name: FLEXINFER_CLUSTER_FAILURE_THRESHOLD
  value: {{ $values.operator.federation.clusterFailureThreshold | int64 | quote }}
{{- end }}
{{- with $values.modelPods.cacheStorageClass }}
# StorageClass of cache PVCs (unset: the cluster's default class).
- name: FLEXINFER_CACHE_STORAGE_CLASS
  value: {{ . | quote }}
{{- end }}
{{- with $values.modelPods.nvidiaRuntimeClass }}
# runtimeClassName of NVIDIA GPU model pods (unset: none).
- name: FLEXINFER_NVIDIA_RUNTIME_CLASS
  value: {{ . | quote }}
{{- end }}
# Tolerations of GPU model pods and their cache Jobs.
- name: FLEXINFER_GPU_TOLERATIONS
  value: {{ $values.modelPods.gpuTolerations | toJson | quote }}
- name: DEFAULT_FLASH_LOADER_IMAGE
  value: {{ include "flexinfer.image" (dict "root" .root "image" $values.flashload.image "name" "flexinfer-flashload") | quote }}
{{- with $values.quantizer.image.repository }}
# Image of quantization Jobs (Models with spec.quantize).
- name: DEFAULT_QUANTIZER_IMAGE
  value: {{ ternary (printf "%s:%s" . $values.quantizer.image.tag) . (ne $values.quantizer.image.tag "") | quote }}
{{- end }}
{{- range $name, $value := $values.operator.env }}
{{- if not (hasKey $.except $name) }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}
{{- end }}
