{{/*
Names, labels, images, the TOML renderer and the pieces of config every component shares.
*/}}

{{- define "babysitter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "babysitter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of a component: (dict "root" $ "component" "journal") */}}
{{- define "babysitter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: babysitter
{{ include "babysitter.selectorLabels" . }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "babysitter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "babysitter.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .pool }}
babysitter.a5c.ai/pool: {{ . }}
{{- end }}
{{- end -}}

{{/* matchLabels selecting every pod of a component (all pools for the launcher) */}}
{{- define "babysitter.componentSelector" -}}
app.kubernetes.io/name: {{ include "babysitter.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Image of a component: (dict "root" $ "image" .Values.journal.image) */}}
{{- define "babysitter.image" -}}
{{- $tag := .image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- $repo := .image.repository -}}
{{- with .root.Values.image.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- printf "%s:%s" $repo (toString $tag) -}}
{{- end -}}

{{- define "babysitter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "babysitter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "babysitter.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end -}}
{{- end -}}

{{/* Fixed paths inside the pods */}}
{{- define "babysitter.configPath" -}}/etc/babysitter/config.toml{{- end -}}
{{- define "babysitter.tokenDir" -}}/run/secrets/babysitter/tokens{{- end -}}
{{- define "babysitter.tlsDir" -}}/run/secrets/babysitter/tls{{- end -}}
{{- define "babysitter.providerDir" -}}/run/secrets/babysitter/providers{{- end -}}

{{- define "babysitter.tokenSecret" -}}
{{- .Values.auth.existingSecret | default (printf "%s-tokens" (include "babysitter.fullname" .)) -}}
{{- end -}}

{{/* TLS Secret of a component: (dict "root" $ "key" "journal" "component" "journal") */}}
{{- define "babysitter.tlsSecret" -}}
{{- $s := index .root.Values.tls.secrets .key -}}
{{- $s | default (printf "%s-%s-tls" (include "babysitter.fullname" .root) .component) -}}
{{- end -}}

{{/* Host of a component's Service: (dict "root" $ "component" "journal") */}}
{{- define "babysitter.host" -}}
{{- printf "%s-%s" (include "babysitter.fullname" .root) .component -}}
{{- end -}}

{{/* [server.tls] (JSON, for fromJson): the server side, client-ca-file under mTLS */}}
{{- define "babysitter.serverTls" -}}
{{- $d := include "babysitter.tlsDir" . -}}
{{- $t := dict "cert-file" (printf "%s/tls.crt" $d) "key-file" (printf "%s/tls.key" $d) "reload-interval" .Values.tls.reloadInterval -}}
{{- if .Values.tls.mtls }}{{ $_ := set $t "client-ca-file" (printf "%s/ca.crt" $d) }}{{ end -}}
{{- toJson $t -}}
{{- end -}}

{{/* A client's TLS table (JSON): (dict "root" $ "serverName" "x") */}}
{{- define "babysitter.clientTls" -}}
{{- $d := include "babysitter.tlsDir" .root -}}
{{- $t := dict "ca-file" (printf "%s/ca.crt" $d) "server-name" .serverName -}}
{{- if .root.Values.tls.mtls }}{{ $_ := set $t "cert-file" (printf "%s/tls.crt" $d) }}{{ $_ := set $t "key-file" (printf "%s/tls.key" $d) }}{{ end -}}
{{- toJson $t -}}
{{- end -}}

{{/* [telemetry] (JSON) */}}
{{- define "babysitter.telemetry" -}}
{{- $t := dict "log-format" "json" -}}
{{- if .Values.metrics.enabled }}
{{- $_ := set $t "metrics-listen-addr" (include "babysitter.addr" (dict "root" . "port" .Values.metrics.port)) -}}
{{- if and .Values.tls.enabled .Values.tls.metrics }}
{{- $d := include "babysitter.tlsDir" . -}}
{{- $_ := set $t "metrics-tls" (dict "cert-file" (printf "%s/tls.crt" $d) "key-file" (printf "%s/tls.key" $d) "reload-interval" .Values.tls.reloadInterval) -}}
{{- end }}
{{- end }}
{{- toJson $t -}}
{{- end -}}

{{/* listen address host:port, IPv6-aware: (dict "root" $ "port" 1) */}}
{{- define "babysitter.addr" -}}
{{- if contains ":" .root.Values.listenHost -}}
[{{ .root.Values.listenHost }}]:{{ .port }}
{{- else -}}
{{ .root.Values.listenHost }}:{{ .port }}
{{- end -}}
{{- end -}}

{{/*
TOML rendering. Helm's toToml prints every number of values.yaml as a float (`5000.0`), which
the services' integer keys refuse, so the configs are rendered here: integral numbers as
integers, strings JSON-quoted (a valid TOML basic string), maps as [tables] (inline inside
arrays), nulls left out (an unset Option).
*/}}
{{- define "babysitter.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end -}}
{{- end -}}

{{- define "babysitter.toml.value" -}}
{{- $v := . -}}
{{- if kindIs "map" $v -}}
{ {{- $first := true -}}
{{- range $k, $x := $v -}}
{{- if not (kindIs "invalid" $x) -}}
{{- if not $first }}, {{ else }} {{ end -}}
{{- $first = false -}}
{{- include "babysitter.toml.key" $k }} = {{ include "babysitter.toml.value" $x -}}
{{- end -}}
{{- end }} }
{{- else if kindIs "slice" $v -}}
[{{- range $i, $x := $v -}}{{- if $i }}, {{ end -}}{{- include "babysitter.toml.value" $x -}}{{- end -}}]
{{- else if kindIs "bool" $v -}}
{{- $v -}}
{{- else if kindIs "float64" $v -}}
{{- if eq $v (float64 (int64 $v)) }}{{ int64 $v }}{{ else }}{{ $v }}{{ end -}}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) -}}
{{- $v -}}
{{- else -}}
{{- toJson (toString $v) -}}
{{- end -}}
{{- end -}}

{{/* (dict "table" map "path" "a.b") */}}
{{- define "babysitter.toml.table" -}}
{{- $path := .path -}}
{{- range $k, $v := .table }}
{{- if not (or (kindIs "map" $v) (kindIs "invalid" $v)) }}
{{ include "babysitter.toml.key" $k }} = {{ include "babysitter.toml.value" $v }}
{{- end }}
{{- end }}
{{- range $k, $v := .table }}
{{- if kindIs "map" $v }}
{{- $p := include "babysitter.toml.key" $k }}
{{- if $path }}{{ $p = printf "%s.%s" $path $p }}{{ end }}

[{{ $p }}]
{{- include "babysitter.toml.table" (dict "table" $v "path" $p) }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "babysitter.toml" -}}
# Generated by the babysitter Helm chart from its values; `<component>.config` is merged last.
{{- include "babysitter.toml.table" (dict "table" . "path" "") }}
{{ end -}}

{{/* Pod-level pieces shared by every pod */}}
{{- define "babysitter.podCommon" -}}
serviceAccountName: {{ include "babysitter.serviceAccountName" . }}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Probes of a gRPC component: (dict "root" $ "binary" path "port" n) */}}
{{- define "babysitter.grpcProbes" -}}
{{- $p := .root.Values.probes -}}
{{- range $kind := list "startupProbe" "livenessProbe" "readinessProbe" }}
{{ $kind }}:
  {{- if eq $p.mode "grpc" }}
  grpc:
    port: {{ $.port }}
  {{- else }}
  exec:
    command: [{{ $.binary | quote }}, "--config", {{ include "babysitter.configPath" $.root | quote }}, "--health-check"]
  {{- end }}
  periodSeconds: {{ $p.periodSeconds }}
  timeoutSeconds: {{ $p.timeoutSeconds }}
  failureThreshold: {{ if eq $kind "startupProbe" }}{{ $p.startupFailureThreshold }}{{ else }}{{ $p.failureThreshold }}{{ end }}
{{- end }}
{{- end -}}

{{/* Volumes every pod has: config, tmp, tokens (items), TLS. (dict "root" $ "component" c "tlsKey" k "tokens" (list ...)) */}}
{{- define "babysitter.commonVolumes" -}}
- name: config
  configMap:
    name: {{ .configMap }}
- name: tmp
  emptyDir:
    sizeLimit: 1Gi
{{- if and .root.Values.auth.enabled .tokens }}
- name: tokens
  secret:
    secretName: {{ include "babysitter.tokenSecret" .root }}
    defaultMode: 0440
    items:
    {{- range .tokens }}
      - key: {{ . }}
        path: {{ . }}
    {{- end }}
{{- end }}
{{- if .root.Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "babysitter.tlsSecret" (dict "root" .root "key" .tlsKey "component" .component) }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{- define "babysitter.commonMounts" -}}
- name: config
  mountPath: /etc/babysitter
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if and .root.Values.auth.enabled .tokens }}
- name: tokens
  mountPath: {{ include "babysitter.tokenDir" .root }}
  readOnly: true
{{- end }}
{{- if .root.Values.tls.enabled }}
{{- /* the whole directory, not subPath: renewals of the Secret reach the pod */}}
- name: tls
  mountPath: {{ include "babysitter.tlsDir" .root }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "babysitter.metricsPort" -}}
{{- if .Values.metrics.enabled }}
- name: metrics
  containerPort: {{ .Values.metrics.port }}
  protocol: TCP
{{- end }}
{{- end -}}
