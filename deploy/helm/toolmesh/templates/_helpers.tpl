{{/* Names, labels and the values every template derives from the same place. */}}

{{- define "toolmesh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* RELEASE-toolmesh, or RELEASE alone when it already says toolmesh; cut so that the longest
suffix (-llama-server, 13 characters) still fits a 63-character DNS label. */}}
{{- define "toolmesh.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "toolmesh.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "toolmesh.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: toolmesh
{{- end }}

{{/* Selector labels of one component: call with (list $ "api"). */}}
{{- define "toolmesh.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "toolmesh.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "toolmesh.componentLabels" -}}
{{ include "toolmesh.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "toolmesh.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "toolmesh.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "toolmesh.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The fixed ports of the toolmesh services (DESIGN.md). */}}
{{- define "toolmesh.port" -}}
{{- get (dict "api-http" 7700 "api-grpc" 7701 "retriever" 7702 "inference" 7703 "executor" 7704 "llama-server" 8080) . }}
{{- end }}

{{/* The gRPC service each internal target reports in grpc.health.v1. */}}
{{- define "toolmesh.healthService" -}}
{{- get (dict "retriever" "toolmesh.v1.RetrieverService" "inference" "toolmesh.v1.InferenceService" "executor" "toolmesh.v1.ExecutorService") . }}
{{- end }}

{{/* The full DNS name of a component's Service: (list $ "executor"). The api and the retriever
dial it as host:port; grpc-go resolves it with DNS and, the Services of the internal targets
being headless, spreads calls round-robin over every pod (internal/server.DialOptions). */}}
{{- define "toolmesh.serviceHost" -}}
{{- $ := index . 0 -}}
{{- printf "%s-%s.%s.svc.%s" (include "toolmesh.fullname" $) (index . 1) $.Release.Namespace $.Values.clusterDomain }}
{{- end }}

{{- define "toolmesh.serviceAddr" -}}
{{- printf "%s:%s" (include "toolmesh.serviceHost" .) (include "toolmesh.port" (index . 1)) }}
{{- end }}

{{/* llama-server runs in this release only for the gorilla backend without an outside URL. */}}
{{- define "toolmesh.llamaServer.enabled" -}}
{{- if and (eq .Values.inference.backend "gorilla") (not .Values.inference.llm.url) }}true{{ end }}
{{- end }}

{{/* The retriever's store: memory, or qdrant when there is a Qdrant to use. */}}
{{- define "toolmesh.retriever.store" -}}
{{- if .Values.retriever.store }}{{ .Values.retriever.store }}
{{- else if or .Values.qdrant.enabled .Values.retriever.qdrant.addr }}qdrant
{{- else }}memory
{{- end }}
{{- end }}

{{/* Qdrant's gRPC address: the Service of Qdrant's chart (named as that chart names it:
RELEASE-qdrant, RELEASE when it contains "qdrant", or qdrant.fullnameOverride), or
retriever.qdrant.addr. */}}
{{- define "toolmesh.qdrant.addr" -}}
{{- if .Values.qdrant.enabled }}
{{- $name := "" }}
{{- if .Values.qdrant.fullnameOverride }}
{{- $name = .Values.qdrant.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $chart := default "qdrant" .Values.qdrant.nameOverride }}
{{- if contains $chart .Release.Name }}
{{- $name = .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name = printf "%s-%s" .Release.Name $chart | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- printf "%s.%s.svc.%s:6334" $name .Release.Namespace .Values.clusterDomain }}
{{- else }}
{{- .Values.retriever.qdrant.addr }}
{{- end }}
{{- end }}

{{- define "toolmesh.tls.secretName" -}}
{{- if .Values.tls.existingSecret }}
{{- .Values.tls.existingSecret }}
{{- else if .Values.tls.certManager.enabled }}
{{- printf "%s-tls" (include "toolmesh.fullname" .) }}
{{- else }}
{{- fail "tls.enabled: set tls.existingSecret (a Secret with tls.crt, tls.key and ca.crt) or tls.certManager.enabled" }}
{{- end }}
{{- end }}

{{- define "toolmesh.configMapName" -}}
{{- printf "%s-config" (include "toolmesh.fullname" .) }}
{{- end }}

{{/* Where the pods mount what. */}}
{{- define "toolmesh.configDir" -}}/etc/toolmesh/config{{- end }}
{{- define "toolmesh.pinsDir" -}}/etc/toolmesh/pins{{- end }}
{{- define "toolmesh.pinsConfigMapName" -}}
{{- default (printf "%s-pins" (include "toolmesh.fullname" .)) .Values.executor.pins.existingConfigMap }}
{{- end }}
{{- define "toolmesh.tlsDir" -}}/etc/toolmesh/tls{{- end }}
{{- define "toolmesh.tokensDir" -}}/etc/toolmesh/api-tokens{{- end }}
{{- define "toolmesh.qdrantCADir" -}}/etc/toolmesh/qdrant-ca{{- end }}

{{/* toolmesh.yaml: what every target reads with --config. Keys are flag names. */}}
{{- define "toolmesh.config" -}}
{{- $ := . -}}
{{- $cfg := dict
  "log" (dict "format" .Values.log.format "level" .Values.log.level)
  "drain-timeout" (printf "%ds" (int .Values.drainTimeoutSeconds))
  "executor" (dict "grpc-addr" "0.0.0.0:7704")
  "retriever" (dict
    "grpc-addr" "0.0.0.0:7702"
    "executor-addr" (include "toolmesh.serviceAddr" (list $ "executor"))
    "store" (include "toolmesh.retriever.store" .))
  "inference" (dict "grpc-addr" "0.0.0.0:7703" "backend" .Values.inference.backend)
  "api" (dict
    "http-addr" "0.0.0.0:7700"
    "grpc-addr" "0.0.0.0:7701"
    "executor-addr" (include "toolmesh.serviceAddr" (list $ "executor"))
    "retriever-addr" (include "toolmesh.serviceAddr" (list $ "retriever"))
    "inference-addr" (include "toolmesh.serviceAddr" (list $ "inference")))
-}}
{{- if .Values.metrics.enabled }}
{{- $_ := set $cfg "metrics-addr" (printf "0.0.0.0:%d" (int .Values.metrics.port)) }}
{{- end }}
{{- if .Values.otel.endpoint }}
{{- $_ := set $cfg "otel" (dict "endpoint" .Values.otel.endpoint "insecure" .Values.otel.insecure) }}
{{- end }}
{{- if .Values.jaeger.uiUrl }}
{{- $_ := set $cfg.api "jaeger-url" .Values.jaeger.uiUrl }}
{{- end }}
{{- if eq (include "toolmesh.retriever.store" .) "qdrant" }}
{{- $addr := include "toolmesh.qdrant.addr" . }}
{{- if not $addr }}
{{- fail "retriever.store is qdrant: set qdrant.enabled or retriever.qdrant.addr" }}
{{- end }}
{{- $_ := set $cfg.retriever "qdrant" (dict "addr" $addr "tls" .Values.retriever.qdrant.tls "collection" .Values.retriever.qdrant.collection) }}
{{- if .Values.retriever.qdrant.ca.existingSecret }}
{{- $_ := set $cfg.retriever.qdrant "ca-file" (printf "%s/ca.crt" (include "toolmesh.qdrantCADir" .)) }}
{{- end }}
{{- end }}
{{- if .Values.retriever.embeddings.url }}
{{- $_ := set $cfg.retriever "embedder" "http" }}
{{- $_ := set $cfg.retriever "embed" (dict "url" .Values.retriever.embeddings.url "model" .Values.retriever.embeddings.model) }}
{{- end }}
{{- if eq .Values.inference.backend "openai" }}
{{- if or (not .Values.inference.chat.url) (not .Values.inference.chat.model) }}
{{- fail "inference.backend is openai: set inference.chat.url and inference.chat.model" }}
{{- end }}
{{- $_ := set $cfg.inference "chat" (dict "url" .Values.inference.chat.url "model" .Values.inference.chat.model) }}
{{- else if eq .Values.inference.backend "gorilla" }}
{{- $url := .Values.inference.llm.url }}
{{- if not $url }}
{{- $url = printf "http://%s:8080" (include "toolmesh.serviceHost" (list $ "llama-server")) }}
{{- end }}
{{- $_ := set $cfg.inference "llm" (dict "url" $url "model" .Values.inference.llm.model "ready-timeout" .Values.inference.llm.readyTimeout) }}
{{- else }}
{{- fail (printf "inference.backend: %q is not gorilla or openai" .Values.inference.backend) }}
{{- end }}
{{- if .Values.api.auth.existingSecret }}
{{- $_ := set $cfg.api "tokens-file" (printf "%s/tokens" (include "toolmesh.tokensDir" .)) }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $dir := include "toolmesh.tlsDir" . }}
{{- $_ := set $cfg "tls" (dict "cert-file" (printf "%s/tls.crt" $dir) "key-file" (printf "%s/tls.key" $dir) "ca-file" (printf "%s/ca.crt" $dir)) }}
{{- else }}
{{- /* The internal ports listen on the pod's IP; without mTLS they refuse to unless told that is meant. The NetworkPolicies admit only their callers. */}}
{{- $_ := set $cfg "allow-insecure-internal" true }}
{{- end }}
{{- if hasKey .Values.config "mcpServers" }}
{{- fail "config.mcpServers: declare MCP servers in mcpServers (the chart writes them to mcp.json)" }}
{{- end }}
{{- toYaml (mustMergeOverwrite $cfg (deepCopy .Values.config)) }}
{{- end }}

{{/* mcp.json: the demo servers, mcpServers, and one entry per executor sidecar (over loopback). */}}
{{- define "toolmesh.mcpJSON" -}}
{{- $servers := dict }}
{{- if .Values.demoServers }}
{{- range list "calculator" "converter" "sqlite" }}
{{- $_ := set $servers . (dict "command" "toolmesh" "args" (list "mcp" . "--transport" "stdio")) }}
{{- end }}
{{- end }}
{{- range $name, $server := .Values.mcpServers }}
{{- if hasKey $servers $name }}
{{- fail (printf "mcpServers.%s: the name of a demo server (set demoServers: false to use it)" $name) }}
{{- end }}
{{- $_ := set $servers $name $server }}
{{- end }}
{{- range .Values.executor.sidecars }}
{{- if hasKey $servers .name }}
{{- fail (printf "executor.sidecars: %q is also in mcpServers" .name) }}
{{- end }}
{{- $_ := set $servers .name (dict "url" (printf "http://127.0.0.1:%d%s" (int .port) (default "/mcp" .path)) "transport" (default "streamable-http" .transport)) }}
{{- end }}
{{- toPrettyJson (dict "mcpServers" $servers) }}
{{- end }}

{{/* terminationGracePeriodSeconds: longer than the preStop sleep plus the drain, so a stop never
cuts a request that the drain would have let finish. */}}
{{- define "toolmesh.gracePeriod" -}}
{{- add (int .Values.preStopSleepSeconds) (int .Values.drainTimeoutSeconds) 5 }}
{{- end }}

{{- define "toolmesh.lifecycle" -}}
{{- if gt (int .Values.preStopSleepSeconds) 0 }}
lifecycle:
  preStop:
    sleep:
      seconds: {{ int .Values.preStopSleepSeconds }}
{{- end }}
{{- end }}

{{/* Scheduling of one component: its own settings, else spread its replicas over nodes. */}}
{{- define "toolmesh.scheduling" -}}
{{- $ := index . 0 }}
{{- $component := index . 1 }}
{{- $s := index . 2 }}
{{- with $s.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $s.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $s.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if hasKey $s "topologySpreadConstraints" }}
{{- with $s.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- else }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "toolmesh.selectorLabels" (list $ $component) | nindent 8 }}
{{- end }}
{{- end }}

{{/* A Secret's key as an environment variable: (list NAME SECRETREF), SECRETREF {existingSecret, key}. */}}
{{- define "toolmesh.secretEnv" -}}
{{- $ref := index . 1 }}
{{- if $ref.existingSecret }}
- name: {{ index . 0 }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.existingSecret }}
      key: {{ $ref.key }}
{{- end }}
{{- end }}

{{/* The PodDisruptionBudget of a component: (list $ "api" .Values.api.pdb). */}}
{{- define "toolmesh.pdb" -}}
{{- $ := index . 0 }}
{{- $component := index . 1 }}
{{- $pdb := index . 2 }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "toolmesh.fullname" $ }}-{{ $component }}
  labels:
    {{- include "toolmesh.componentLabels" (list $ $component) | nindent 4 }}
spec:
  {{- if hasKey $pdb "minAvailable" }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $pdb.maxUnavailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "toolmesh.selectorLabels" (list $ $component) | nindent 6 }}
{{- end }}

{{/* The HorizontalPodAutoscaler of a component: (list $ "api" .Values.api.autoscaling). */}}
{{- define "toolmesh.hpa" -}}
{{- $ := index . 0 }}
{{- $component := index . 1 }}
{{- $a := index . 2 }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "toolmesh.fullname" $ }}-{{ $component }}
  labels:
    {{- include "toolmesh.componentLabels" (list $ $component) | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "toolmesh.fullname" $ }}-{{ $component }}
  minReplicas: {{ $a.minReplicas }}
  maxReplicas: {{ $a.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ $a.targetCPUUtilizationPercentage }}
{{- end }}

{{/* The Service of an internal gRPC target: headless, so its name resolves to every ready pod
and the callers' round-robin balancer spreads calls over all of them (a ClusterIP Service would
pin each long-lived HTTP/2 connection, and so every call, to one pod). */}}
{{- define "toolmesh.headlessService" -}}
{{- $ := index . 0 }}
{{- $component := index . 1 }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "toolmesh.fullname" $ }}-{{ $component }}
  labels:
    {{- include "toolmesh.componentLabels" (list $ $component) | nindent 4 }}
spec:
  clusterIP: None
  selector:
    {{- include "toolmesh.selectorLabels" (list $ $component) | nindent 4 }}
  ports:
    - name: grpc
      port: {{ include "toolmesh.port" $component }}
      targetPort: grpc
      appProtocol: kubernetes.io/h2c
{{- end }}

{{/* The ingress rule that lets networkPolicy.metricsFrom scrape metrics.port: (list $ WANTED). */}}
{{- define "toolmesh.metricsIngress" -}}
{{- $ := index . 0 }}
{{- if and (index . 1) $.Values.metrics.enabled $.Values.networkPolicy.metricsFrom }}
- ports:
    - port: {{ $.Values.metrics.port }}
      protocol: TCP
  from:
    {{- toYaml $.Values.networkPolicy.metricsFrom | nindent 4 }}
{{- end }}
{{- end }}

{{/* The Secret the executors keep OAuth tokens in (executor.oauth). */}}
{{- define "toolmesh.oauthSecretName" -}}
{{- default (printf "%s-oauth-tokens" (include "toolmesh.fullname" .)) .Values.executor.oauth.secretName }}
{{- end }}
