{{/* The Deployment of one toolmesh target (`toolmesh serve --target=NAME`): (list $ "api").
The four targets differ only in ports, probes, secrets and (the executor) MCP server sidecars.
The executor alone reads mcp.json: it connects to the servers and publishes their rules
(allowedTools, excludedTools, allowDestructive, rateLimit) with its catalog, which the api
decides by, so the api mounts neither the file nor the servers' secrets (executor.env). */}}
{{- define "toolmesh.deployment" -}}
{{- $ := index . 0 }}
{{- $component := index . 1 }}
{{- $v := index $.Values $component }}
{{- $fullname := include "toolmesh.fullname" $ }}
{{- $autoscaled := and (hasKey $v "autoscaling") $v.autoscaling.enabled }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $fullname }}-{{ $component }}
  labels:
    {{- include "toolmesh.componentLabels" (list $ $component) | nindent 4 }}
spec:
  {{- if not $autoscaled }}
  replicas: {{ $v.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  strategy:
    type: RollingUpdate
    rollingUpdate:
      # A new pod is ready before an old one stops: capacity never drops during an upgrade.
      maxUnavailable: 0
      maxSurge: 1
  selector:
    matchLabels:
      {{- include "toolmesh.selectorLabels" (list $ $component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "toolmesh.selectorLabels" (list $ $component) | nindent 8 }}
      annotations:
        {{- if $.Values.rolloutOnConfigChange }}
        {{- /* No checksum of mcp.json: the executor reloads it when the mounted ConfigMap changes (and the api follows its rules). */}}
        checksum/config: {{ include "toolmesh.config" $ | sha256sum }}
        {{- end }}
        {{- if $.Values.metrics.enabled }}
        {{- if $.Values.metrics.podAnnotations }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ $.Values.metrics.port | quote }}
        prometheus.io/path: /metrics
        {{- end }}
        {{- end }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "toolmesh.serviceAccountName" $ }}
      {{- /* Only an executor keeping OAuth tokens in a Secret talks to the Kubernetes API. */}}
      automountServiceAccountToken: {{ and (eq $component "executor") $.Values.executor.oauth.enabled }}
      {{- with $.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      terminationGracePeriodSeconds: {{ include "toolmesh.gracePeriod" $ }}
      securityContext:
        {{- toYaml $.Values.podSecurityContext | nindent 8 }}
      {{- include "toolmesh.scheduling" (list $ $component $v.scheduling) | trim | nindent 6 }}
      containers:
        - name: {{ $component }}
          image: {{ include "toolmesh.image" $ }}
          imagePullPolicy: {{ $.Values.image.pullPolicy }}
          args:
            - serve
            - --target={{ $component }}
            - --config={{ include "toolmesh.configDir" $ }}/toolmesh.yaml
            {{- if eq $component "executor" }}
            - --mcp-config={{ include "toolmesh.configDir" $ }}/mcp.json
            {{- end }}
            {{- if eq $component "executor" }}
            - --executor.pin-file={{ include "toolmesh.pinsDir" $ }}/pins.json
            {{- if $.Values.executor.oauth.enabled }}
            - --executor.oauth-secret={{ include "toolmesh.oauthSecretName" $ }}
            {{- end }}
            {{- end }}
            {{- with $v.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            # Each pod's name and namespace on its spans, so a trace shows which replica served.
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: OTEL_RESOURCE_ATTRIBUTES
              value: k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE)
            {{- if eq $component "api" }}
            {{- if $.Values.api.auth.existingSecret }}
            # One of the tokens, for the readiness probe's request to /readyz.
            {{- include "toolmesh.secretEnv" (list "TOOLMESH_TOKEN" (dict "existingSecret" $.Values.api.auth.existingSecret "key" $.Values.api.auth.probeTokenKey)) | trim | nindent 12 }}
            {{- end }}
            {{- else if eq $component "retriever" }}
            {{- include "toolmesh.secretEnv" (list "TOOLMESH_QDRANT_API_KEY" $.Values.retriever.qdrant.apiKey) | trim | nindent 12 }}
            {{- include "toolmesh.secretEnv" (list "TOOLMESH_EMBED_API_KEY" $.Values.retriever.embeddings.apiKey) | trim | nindent 12 }}
            {{- else if eq $component "inference" }}
            {{- include "toolmesh.secretEnv" (list "TOOLMESH_LLM_API_KEY" $.Values.inference.apiKey) | trim | nindent 12 }}
            {{- end }}
            {{- with (ternary $v.env $v.extraEnv (eq $component "executor")) }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            {{- if eq $component "api" }}
            - name: http
              containerPort: 7700
            - name: grpc
              containerPort: 7701
            {{- else }}
            - name: grpc
              containerPort: {{ include "toolmesh.port" $component }}
            {{- end }}
            {{- if $.Values.metrics.enabled }}
            - name: metrics
              containerPort: {{ $.Values.metrics.port }}
            {{- end }}
          {{- include "toolmesh.probes" (list $ $component) | trim | nindent 10 }}
          {{- include "toolmesh.lifecycle" $ | trim | nindent 10 }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $.Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: config
              mountPath: {{ include "toolmesh.configDir" $ }}
              readOnly: true
            - name: tmp
              mountPath: /tmp
            {{- if eq $component "executor" }}
            # A directory mount (not subPath), so an updated pin file reaches the running pod.
            - name: pins
              mountPath: {{ include "toolmesh.pinsDir" $ }}
              readOnly: true
            {{- end }}
            {{- if $.Values.tls.enabled }}
            - name: tls
              mountPath: {{ include "toolmesh.tlsDir" $ }}
              readOnly: true
            {{- end }}
            {{- if and (eq $component "api") $.Values.api.auth.existingSecret }}
            - name: api-tokens
              mountPath: {{ include "toolmesh.tokensDir" $ }}
              readOnly: true
            {{- end }}
            {{- if and (eq $component "retriever") $.Values.retriever.qdrant.ca.existingSecret }}
            - name: qdrant-ca
              mountPath: {{ include "toolmesh.qdrantCADir" $ }}
              readOnly: true
            {{- end }}
        {{- if eq $component "executor" }}
        {{- range $.Values.executor.sidecars }}
        {{- include "toolmesh.sidecar" (list $ .) | nindent 8 }}
        {{- end }}
        {{- end }}
      volumes:
        # A directory mount (not subPath), so an updated ConfigMap reaches the running pod.
        - name: config
          configMap:
            name: {{ include "toolmesh.configMapName" $ }}
            items:
              - key: toolmesh.yaml
                path: toolmesh.yaml
              {{- if eq $component "executor" }}
              - key: mcp.json
                path: mcp.json
              {{- end }}
        # The root filesystem is read-only; stdio MCP servers and temporary files use /tmp.
        - name: tmp
          emptyDir:
            sizeLimit: 256Mi
        {{- if eq $component "executor" }}
        - name: pins
          configMap:
            name: {{ include "toolmesh.pinsConfigMapName" $ }}
            items:
              - key: pins.json
                path: pins.json
        {{- end }}
        {{- if $.Values.tls.enabled }}
        - name: tls
          secret:
            secretName: {{ include "toolmesh.tls.secretName" $ }}
            defaultMode: 0440
        {{- end }}
        {{- if and (eq $component "api") $.Values.api.auth.existingSecret }}
        - name: api-tokens
          secret:
            secretName: {{ $.Values.api.auth.existingSecret }}
            defaultMode: 0440
            items:
              - key: {{ $.Values.api.auth.tokensKey }}
                path: tokens
        {{- end }}
        {{- if and (eq $component "retriever") $.Values.retriever.qdrant.ca.existingSecret }}
        - name: qdrant-ca
          secret:
            secretName: {{ $.Values.retriever.qdrant.ca.existingSecret }}
            defaultMode: 0440
            items:
              - key: {{ $.Values.retriever.qdrant.ca.key }}
                path: ca.crt
        {{- end }}
{{- end }}

{{/* Probes of a toolmesh target. The internal targets answer grpc.health.v1 for their own
service; Kubernetes' gRPC probe speaks plaintext only, so with mTLS the image's
toolmesh-healthcheck runs the same check over TLS. The api is ready on /readyz (the executor
answers with its catalog, the index in step; an MCP server that is down is reported there, not
failed on, so it cannot empty the api's Service) and alive on /healthz. */}}
{{- define "toolmesh.probes" -}}
{{- $ := index . 0 }}
{{- $component := index . 1 }}
{{- if eq $component "api" }}
{{- if $.Values.api.auth.existingSecret }}
# /readyz needs a token when auth is on, and an httpGet probe cannot take one from a Secret.
# Any token will do: readiness is the same for all (a narrow one reads only its servers).
readinessProbe:
  exec:
    command: [toolmesh-healthcheck, -timeout=4s, http, "http://127.0.0.1:7700/readyz"]
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
{{- else }}
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
{{- end }}
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 6
startupProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 2
  failureThreshold: 60
{{- else }}
{{- $port := include "toolmesh.port" $component }}
{{- $service := include "toolmesh.healthService" $component }}
{{- range $probe := list "readinessProbe" "livenessProbe" "startupProbe" }}
{{ $probe }}:
  {{- if $.Values.tls.enabled }}
  {{- $dir := include "toolmesh.tlsDir" $ }}
  exec:
    command:
      - toolmesh-healthcheck
      - -timeout=4s
      - -tls.cert-file={{ $dir }}/tls.crt
      - -tls.key-file={{ $dir }}/tls.key
      - -tls.ca-file={{ $dir }}/ca.crt
      - -tls.server-name={{ include "toolmesh.serviceHost" (list $ $component) }}
      - grpc
      - 127.0.0.1:{{ $port }}
      {{- if ne $probe "livenessProbe" }}
      - {{ $service }}
      {{- end }}
  {{- else }}
  grpc:
    port: {{ $port }}
    {{- if ne $probe "livenessProbe" }}
    service: {{ $service }}
    {{- end }}
  {{- end }}
  {{- if eq $probe "startupProbe" }}
  periodSeconds: 2
  failureThreshold: 60
  {{- else }}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: {{ ternary 3 6 (eq $probe "readinessProbe") }}
  {{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* An MCP server beside the executor, reached on loopback: (list $ SIDECAR). */}}
{{- define "toolmesh.sidecar" -}}
{{- $ := index . 0 }}
{{- $s := index . 1 }}
{{- if not (regexMatch "^[a-z0-9_-]+$" (toString $s.name)) }}
{{- fail (printf "executor.sidecars: name %q must match [a-z0-9_-]+ (it is the MCP server's name)" (toString $s.name)) }}
{{- end }}
{{- if not $s.port }}
{{- fail (printf "executor.sidecars %s: port is required" $s.name) }}
{{- end }}
- name: mcp-{{ $s.name | replace "_" "-" }}
  {{- if $s.image }}
  image: {{ $s.image }}
  {{- else }}
  image: {{ include "toolmesh.image" $ }}
  {{- end }}
  imagePullPolicy: {{ $.Values.image.pullPolicy }}
  {{- with $s.command }}
  command:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $s.args }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $s.env }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - name: mcp-{{ int $s.port }}
      containerPort: {{ int $s.port }}
  {{- if $s.probe }}
  readinessProbe:
    {{- toYaml $s.probe | nindent 4 }}
  livenessProbe:
    {{- toYaml $s.probe | nindent 4 }}
  {{- else }}
  # An MCP endpoint streams, so a TCP connect is the default probe (an HTTP probe would wait
  # on the stream). The kubelet connects to the pod's IP: the server must listen on 0.0.0.0
  # (the NetworkPolicy keeps other pods off the port) or the sidecar must give its own probe.
  readinessProbe:
    tcpSocket:
      port: {{ int $s.port }}
    periodSeconds: 10
  livenessProbe:
    tcpSocket:
      port: {{ int $s.port }}
    periodSeconds: 10
    failureThreshold: 6
  {{- end }}
  resources:
    {{- toYaml (default $.Values.executor.sidecarResources $s.resources) | nindent 4 }}
  securityContext:
    {{- toYaml $.Values.securityContext | nindent 4 }}
  volumeMounts:
    - name: tmp
      mountPath: /tmp
{{- end }}
