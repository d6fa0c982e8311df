{{/* Names, labels and the pieces both Deployments share. */}}

{{- define "verdict.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "verdict.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The name of one component's objects: <fullname>-scheduler, <fullname>-worker. */}}
{{- define "verdict.componentName" -}}
{{- printf "%s-%s" (include "verdict.fullname" .root | trunc 52 | trimSuffix "-") .component -}}
{{- end -}}

{{- define "verdict.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "verdict.selectorLabels" -}}
app.kubernetes.io/name: {{ include "verdict.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "verdict.labels" -}}
helm.sh/chart: {{ include "verdict.chart" . }}
{{ include "verdict.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: verdict
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component; call with (dict "root" $ "component" "worker"). */}}
{{- define "verdict.componentSelectorLabels" -}}
{{ include "verdict.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "verdict.componentLabels" -}}
{{ include "verdict.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "verdict.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "verdict.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "verdict.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/*
The worker's grace period after SIGTERM, as verdict reads it: config.worker.shutdown_grace_seconds,
else verdict's default (60 s, src/config/defaults.rs).
*/}}
{{- define "verdict.shutdownGraceSeconds" -}}
{{- $worker := .Values.config.worker | default dict -}}
{{- if hasKey $worker "shutdown_grace_seconds" -}}
{{- int64 $worker.shutdown_grace_seconds -}}
{{- else -}}
60
{{- end -}}
{{- end -}}

{{/* terminationGracePeriodSeconds of a worker pod: the stage grace period plus the margin. */}}
{{- define "verdict.workerTerminationGrace" -}}
{{- add (include "verdict.shutdownGraceSeconds" . | int64) (int64 .Values.worker.terminationGraceMarginSeconds) -}}
{{- end -}}

{{/* A worker's slots: config.worker.concurrency / bulk_concurrency, else verdict's defaults. */}}
{{- define "verdict.workerConcurrency" -}}
{{- $worker := .Values.config.worker | default dict -}}
{{- if hasKey $worker "concurrency" }}{{ int64 $worker.concurrency }}{{ else }}8{{ end -}}
{{- end -}}
{{- define "verdict.workerBulkConcurrency" -}}
{{- $worker := .Values.config.worker | default dict -}}
{{- if hasKey $worker "bulk_concurrency" }}{{ int64 $worker.bulk_concurrency }}{{ else }}4{{ end -}}
{{- end -}}

{{/* The broker's name prefix (config.broker.prefix, default "verdict"): the queues' names. */}}
{{- define "verdict.brokerPrefix" -}}
{{- $broker := .Values.config.broker | default dict -}}
{{- $broker.prefix | default "verdict" -}}
{{- end -}}

{{/*
The configuration rendered: config with the keys the chart owns set, as TOML.
*/}}
{{- define "verdict.configToml" -}}
{{- $config := deepCopy (.Values.config | default dict) -}}
{{- if not (hasKey $config "api") }}{{ $_ := set $config "api" dict }}{{ end -}}
{{- if not (hasKey $config "worker") }}{{ $_ := set $config "worker" dict }}{{ end -}}
{{- $_ := set $config.api "listen" (printf "0.0.0.0:%d" (int64 .Values.scheduler.port)) -}}
{{- $_ := set $config.worker "metrics_listen" (printf "0.0.0.0:%d" (int64 .Values.worker.metricsPort)) -}}
{{- $_ := set $config.worker "cache_dir" "/var/cache/verdict" -}}
# verdict's configuration, rendered by the Helm chart from its values (config:).
# Every key: docs/configuration.md. Secrets come from the environment (the *_env keys).
{{ include "verdict.toml.table" (dict "path" "" "table" $config) }}
{{- end -}}

{{/* A TOML key: bare when it can be, quoted otherwise. */}}
{{- define "verdict.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end -}}
{{- end -}}

{{/*
A TOML value. Helm reads every YAML number as a float: whole numbers are written as integers
(verdict's integer keys refuse 600.0; its float keys accept 1).
*/}}
{{- define "verdict.toml.value" -}}
{{- if kindIs "string" . -}}
{{- toJson . -}}
{{- else if kindIs "bool" . -}}
{{- . -}}
{{- else if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- if eq (float64 .) (float64 (int64 .)) }}{{ int64 . }}{{ else }}{{ . }}{{ end -}}
{{- else if kindIs "slice" . -}}
[{{ range $i, $e := . }}{{ if $i }}, {{ end }}{{ include "verdict.toml.value" $e }}{{ end }}]
{{- else -}}
{{- fail (printf "config: %v is not a value verdict's configuration can hold" .) -}}
{{- end -}}
{{- end -}}

{{/* A TOML table: its values first, then its sub-tables under [path.key] headers. */}}
{{- define "verdict.toml.table" -}}
{{- $path := .path -}}
{{- range $k, $v := .table }}
{{- if not (kindIs "map" $v) }}
{{ include "verdict.toml.key" $k }} = {{ include "verdict.toml.value" $v }}
{{- end }}
{{- end }}
{{- range $k, $v := .table }}
{{- if kindIs "map" $v }}
{{- $sub := include "verdict.toml.key" $k }}
{{- if $path }}{{ $sub = printf "%s.%s" $path $sub }}{{ end }}
{{- $values := 0 }}
{{- range $v }}{{ if not (kindIs "map" .) }}{{ $values = add1 $values }}{{ end }}{{ end }}
{{- /* A table holding only tables ([providers]) needs no header of its own. */}}
{{- if or $values (not $v) }}

[{{ $sub }}]
{{- end }}
{{- include "verdict.toml.table" (dict "path" $sub "table" $v) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* One variable from a Secret: (dict "env" NAME "ref" {name, key}). */}}
{{- define "verdict.secretEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .ref.name }}
      key: {{ .ref.key }}
{{- end -}}

{{/*
The variables both processes get from Secrets. Each Secret reference is checked against the
configuration: a provider's key needs that provider's api_key_env, a GitHub secret the
matching github.*_env key; and a variable the configuration names must be filled.
*/}}
{{- define "verdict.secretEnvs" -}}
{{- $config := .Values.config | default dict -}}
{{- with .Values.secrets.brokerUrl }}{{ if .name }}
{{ include "verdict.secretEnv" (dict "env" "VERDICT_BROKER__URL" "ref" .) }}
{{- end }}{{ end }}
{{- with .Values.secrets.redisUrl }}{{ if .name }}
{{ include "verdict.secretEnv" (dict "env" "VERDICT_REDIS__URL" "ref" .) }}
{{- end }}{{ end }}
{{- $providers := $config.providers | default dict -}}
{{- range $name, $ref := .Values.secrets.providers }}
{{- if $ref.name }}
{{- $provider := get $providers $name | default dict }}
{{- if not $provider.api_key_env }}
{{- fail (printf "secrets.providers.%s: config.providers.%s.api_key_env names no variable to put the key in" $name $name) }}
{{- end }}
{{ include "verdict.secretEnv" (dict "env" $provider.api_key_env "ref" $ref) }}
{{- end }}
{{- end }}
{{- $given := list }}
{{- range $.Values.env }}{{ $given = append $given .name }}{{ end }}
{{- range $name, $provider := $providers }}
{{- $ref := get ($.Values.secrets.providers | default dict) $name | default dict }}
{{- if and $provider.api_key_env (not $ref.name) (not (has $provider.api_key_env $given)) }}
{{- fail (printf "config.providers.%s.api_key_env is %s, but secrets.providers.%s names no Secret for it (nor does env: set it)" $name $provider.api_key_env $name) }}
{{- end }}
{{- end }}
{{- $github := $config.github | default dict -}}
{{- range $secret, $configKey := dict "token" "token_env" "appPrivateKey" "app_private_key_env" "webhookSecret" "webhook_secret_env" }}
{{- $ref := get $.Values.secrets.github $secret }}
{{- $var := get $github $configKey }}
{{- if and $ref.name (not $var) }}
{{- fail (printf "secrets.github.%s is set, but config.github.%s names no variable to put it in" $secret $configKey) }}
{{- end }}
{{- if and $var (not $ref.name) (not (has $var $given)) }}
{{- fail (printf "config.github.%s is %s, but secrets.github.%s names no Secret for it" $configKey $var $secret) }}
{{- end }}
{{- if $ref.name }}
{{ include "verdict.secretEnv" (dict "env" $var "ref" $ref) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The API token's variable (scheduler only). */}}
{{- define "verdict.apiTokenEnv" -}}
{{- $api := .Values.config.api | default dict -}}
{{- if .Values.secrets.apiToken.name }}
{{ include "verdict.secretEnv" (dict "env" ($api.token_env | default "VERDICT_API_TOKEN") "ref" .Values.secrets.apiToken) }}
{{- else if not (or $api.allow_unauthenticated $api.token_file) }}
{{- fail "secrets.apiToken.name is empty: the scheduler needs a bearer token (or config.api.token_file, or config.api.allow_unauthenticated behind another authentication layer)" }}
{{- end }}
{{- end -}}

{{/* The volumes both Deployments mount. */}}
{{- define "verdict.volumes" -}}
- name: config
  configMap:
    name: {{ include "verdict.fullname" . }}
- name: cache
{{- if .Values.cache.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ .Values.cache.persistence.existingClaim | default (printf "%s-cache" (include "verdict.fullname" .)) }}
{{- else }}
  emptyDir:
    sizeLimit: {{ .Values.cache.sizeLimit }}
{{- end }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmp.sizeLimit }}
{{- end -}}

{{- define "verdict.volumeMounts" -}}
- name: config
  mountPath: /etc/verdict
  readOnly: true
- name: cache
  mountPath: /var/cache/verdict
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* A probe on an HTTP path: (dict "path" "/healthz" "port" "http" "probe" {periodSeconds…}). */}}
{{- define "verdict.httpProbe" -}}
httpGet:
  path: {{ .path }}
  port: {{ .port }}
periodSeconds: {{ .probe.periodSeconds }}
timeoutSeconds: {{ .probe.timeoutSeconds }}
failureThreshold: {{ .probe.failureThreshold }}
{{- end -}}

{{/* Every variable of one component's container: (dict "root" $ "component" "worker"). */}}
{{- define "verdict.env" -}}
{{- $root := .root -}}
{{- include "verdict.secretEnvs" $root }}
{{- if eq .component "scheduler" }}
{{- include "verdict.apiTokenEnv" $root }}
{{- end }}
{{- with $root.Values.env }}
{{ toYaml . }}
{{- end }}
{{- with (get $root.Values .component).env }}
{{ toYaml . }}
{{- end }}
{{- end -}}
