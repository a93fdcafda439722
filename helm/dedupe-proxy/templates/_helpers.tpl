{{/*
Expand the name of the chart.
*/}}
{{- define "dedupe-proxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "dedupe-proxy.fullname" -}}
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
Create chart name and version as used by the chart label.
*/}}
{{- define "dedupe-proxy.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels: the chart's own, then additionalLabels.
*/}}
{{- define "dedupe-proxy.labels" -}}
{{ include "dedupe-proxy.chartLabels" . }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The labels the chart itself puts on every object and pod.
*/}}
{{- define "dedupe-proxy.chartLabels" -}}
helm.sh/chart: {{ include "dedupe-proxy.chart" . }}
{{ include "dedupe-proxy.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels
*/}}
{{- define "dedupe-proxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dedupe-proxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
A user label map may not hold a key of the chart's own labels, nor
podLabels a key of additionalLabels: both land in the same labels, so
the key would appear twice (helm renders that; a strict decode into the
Kubernetes types refuses it). A selector label's message says more: on
the pods the user's value would fight the Deployment's selector, which
cannot change after install. additionalLabels lands on every object,
podLabels on the pod template only (so only in mode deployment).
*/}}
{{- define "dedupe-proxy.checkLabels" -}}
{{- $selector := include "dedupe-proxy.selectorLabels" . | fromYaml }}
{{- $own := include "dedupe-proxy.chartLabels" . | fromYaml }}
{{- $maps := dict "additionalLabels" .Values.additionalLabels }}
{{- if eq .Values.mode "deployment" }}
{{- $_ := set $maps "podLabels" .Values.podLabels }}
{{- end }}
{{- range $path, $m := $maps }}
{{- range $key, $_ := $m | default dict }}
{{- if hasKey $selector $key }}
{{- $label := printf "%s=%s" $key (index $selector $key) }}
{{- $why := printf "the chart sets %s on every object it renders, so the key would be there twice" $label }}
{{- if eq $.Values.mode "deployment" }}
{{- $why = printf "the chart sets %s on the pods itself: its Deployment selects its pods by that label, and a Deployment's selector cannot change after install" $label }}
{{- end }}
{{- $instead := "to change the chart's value, set nameOverride (it changes the selector too, see docs/kubernetes.md)" }}
{{- if eq $key "app.kubernetes.io/instance" }}
{{- $instead = "the chart's value is the release name: install under another name to change it" }}
{{- end }}
{{- fail (printf "%s.%s: %s. Put your value under another key (app.kubernetes.io/part-of: %s, or your own app: %s); %s" $path $key $why (index $m $key) (index $m $key) $instead) }}
{{- else if hasKey $own $key }}
{{- fail (printf "%s.%s: the chart sets %s=%s on every object it renders, so the key would be there twice. Put your value under another key of your own" $path $key $key (index $own $key)) }}
{{- else if and (eq $path "podLabels") (hasKey ($.Values.additionalLabels | default dict) $key) }}
{{- fail (printf "podLabels.%s: additionalLabels.%s puts it on the pods too, so the key would be there twice. Set it in one of the two" $key $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Create the name of the service account to use
*/}}
{{- define "dedupe-proxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dedupe-proxy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
An image reference: (list IMAGE DEFAULT-TAG) with IMAGE {registry,
repository, tag}: [registry/]repository[:tag], the tag defaulting to
DEFAULT-TAG; with neither, the repository's default tag. Every image of
the chart (app, proxy, test pod) is spelled by this one helper.
*/}}
{{- define "dedupe-proxy.image" -}}
{{- $img := index . 0 }}
{{- $ref := $img.repository }}
{{- with $img.registry }}
{{- $ref = printf "%s/%s" (trimSuffix "/" .) $ref }}
{{- end }}
{{- $tag := $img.tag | default (index . 1) }}
{{- if $tag }}
{{- $ref = printf "%s:%s" $ref $tag }}
{{- end }}
{{- $ref }}
{{- end }}

{{/*
The proxy's image: proxy.image.tag, or the chart's appVersion.
*/}}
{{- define "dedupe-proxy.proxyImage" -}}
{{- include "dedupe-proxy.image" (list .Values.proxy.image .Chart.AppVersion) }}
{{- end }}

{{/*
The app's image: app.image.tag, or the repository alone (its default tag).
*/}}
{{- define "dedupe-proxy.appImage" -}}
{{- include "dedupe-proxy.image" (list .Values.app.image "") }}
{{- end }}

{{/*
The admin port, taken from config.admin.listen. The probes, the Service and
the ServiceMonitor all need the listener, and the kubelet cannot reach a
loopback address, so both mistakes fail the render.
*/}}
{{- define "dedupe-proxy.adminPort" -}}
{{- $listen := dig "admin" "listen" "" .Values.config | toString }}
{{- if not $listen }}
{{- fail "config.admin.listen must be set (e.g. 0.0.0.0:9090): the probes, the Service and the ServiceMonitor use the admin listener" }}
{{- end }}
{{- $port := regexFind "[0-9]+$" $listen }}
{{- $host := trimSuffix (printf ":%s" $port) $listen }}
{{- if or (not $port) (eq $host $listen) }}
{{- fail (printf "config.admin.listen must be host:port, got %q" $listen) }}
{{- end }}
{{- if has $host (list "127.0.0.1" "localhost" "[::1]") }}
{{- fail (printf "config.admin.listen %q is loopback: the kubelet's probes cannot reach it; use 0.0.0.0:%s" $listen $port) }}
{{- end }}
{{- $port }}
{{- end }}

{{/*
The proxy's config.yaml: config from the values, with consumer defaulting to
the full name. Secrets must not land in a ConfigMap: they come from
credentials (existing Secrets, as environment variables).
*/}}
{{- define "dedupe-proxy.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- if not $cfg.consumer }}
{{- $_ := set $cfg "consumer" (include "dedupe-proxy.fullname" .) }}
{{- end }}
{{- if dig "seenset" "redis" "password" "" $cfg }}
{{- fail "config.seenset.redis.password: the config is a ConfigMap; put the password in a Secret and name it in credentials.redisPassword" }}
{{- end }}
{{- if dig "seenset" "redis" "sentinel_password" "" $cfg }}
{{- fail "config.seenset.redis.sentinel_password: the config is a ConfigMap; put the password in a Secret and name it in credentials.redisSentinelPassword" }}
{{- end }}
{{- if dig "admin" "token" "" $cfg }}
{{- fail "config.admin.token: the config is a ConfigMap; put the token in a Secret and name it in credentials.adminToken" }}
{{- end }}
{{- range $field, $cred := dict "url" "appUrl" "health_url" "appHealthUrl" }}
{{- if regexMatch "(?i)^[a-z][a-z0-9+.-]*://[^/@]*:[^/@]*@" (dig "app" $field "" $cfg | toString) }}
{{- fail (printf "config.app.%s holds a password; the config is a ConfigMap: put the URL in a Secret and name it in credentials.%s, which sets DEDUPE_PROXY_APP_%s from it" $field $cred (upper $field)) }}
{{- end }}
{{- end }}
{{- range $i, $src := $cfg.sources | default list }}
{{- $url := dig "rabbitmq" "url" "" $src | toString }}
{{- if regexMatch "^[a-z]+://[^/@]*:[^/@]*@" $url }}
{{- fail (printf "config.sources[%d].rabbitmq.url holds a password; put the URL in a Secret and name it in credentials.sources.%s.rabbitmqUrl" $i (toString $src.name)) }}
{{- end }}
{{- if regexMatch "^[a-z]+://[^/@]*:[^/@]*@" (dig "webhook" "target" "rabbitmq" "url" "" $src | toString) }}
{{- fail (printf "config.sources[%d].webhook.target.rabbitmq.url holds a password; put the URL in a Secret and name it in credentials.sources.%s.webhookRabbitmqUrl" $i (toString $src.name)) }}
{{- end }}
{{- if dig "kafka" "sasl" "password" "" $src }}
{{- fail (printf "config.sources[%d].kafka.sasl.password: put it in a Secret and name it in credentials.sources.%s.kafkaSaslPassword" $i (toString $src.name)) }}
{{- end }}
{{- if dig "redis" "password" "" $src }}
{{- fail (printf "config.sources[%d].redis.password: the config is a ConfigMap; put the password in a Secret and name it in credentials.sources.%s.redisPassword" $i (toString $src.name)) }}
{{- end }}
{{- if regexMatch "(?i)^rediss?://[^/@]*:[^/@]*@" (dig "redis" "url" "" $src | toString) }}
{{- fail (printf "config.sources[%d].redis.url holds a password; put the URL in a Secret and name it in credentials.sources.%s.redisUrl" $i (toString $src.name)) }}
{{- end }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
One env var from an existing Secret: (list NAME REF) with REF {secretName, key}.
*/}}
{{- define "dedupe-proxy.secretEnvVar" -}}
{{- $name := index . 0 }}
{{- $ref := index . 1 }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.secretName | quote }}
      key: {{ $ref.key | quote }}
{{- end }}

{{/*
The proxy's environment: POD_NAME from the downward API, credentials from
existing Secrets, named after the config field they override (DEDUPE_PROXY_ +
the path in upper case, '.' and list indices as '_'), then proxy.env.
*/}}
{{- define "dedupe-proxy.proxyEnv" -}}
{{- /* POD_NAME is a Kafka source's default group_instance_id: a restarted container is the same static member. proxy.env may set it instead. */}}
{{- $ownPod := false }}
{{- range .Values.proxy.env | default list }}
{{- if eq (toString .name) "POD_NAME" }}{{ $ownPod = true }}{{ end }}
{{- end }}
{{- if not $ownPod }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- $c := .Values.credentials }}
{{- range $field, $var := dict "redisPassword" "DEDUPE_PROXY_SEENSET_REDIS_PASSWORD" "redisUsername" "DEDUPE_PROXY_SEENSET_REDIS_USERNAME" "redisSentinelPassword" "DEDUPE_PROXY_SEENSET_REDIS_SENTINEL_PASSWORD" "redisSentinelUsername" "DEDUPE_PROXY_SEENSET_REDIS_SENTINEL_USERNAME" "adminToken" "DEDUPE_PROXY_ADMIN_TOKEN" "appUrl" "DEDUPE_PROXY_APP_URL" "appHealthUrl" "DEDUPE_PROXY_APP_HEALTH_URL" }}
{{- $ref := index $c $field }}
{{- if and $ref $ref.secretName }}
{{- include "dedupe-proxy.secretEnvVar" (list $var $ref) }}
{{- end }}
{{- end }}
{{- $names := list }}
{{- range $i, $src := .Values.config.sources | default list }}
{{- $names = append $names (toString $src.name) }}
{{- $type := $src.type | default "rabbitmq" }}
{{- $refs := index ($c.sources | default dict) (toString $src.name) | default dict }}
{{- range $field, $suffix := dict "rabbitmqUrl" "RABBITMQ_URL" "kafkaSaslUsername" "KAFKA_SASL_USERNAME" "kafkaSaslPassword" "KAFKA_SASL_PASSWORD" "webhookRabbitmqUrl" "WEBHOOK_TARGET_RABBITMQ_URL" "redisPassword" "REDIS_PASSWORD" "redisUsername" "REDIS_USERNAME" "redisUrl" "REDIS_URL" }}
{{- $ref := index $refs $field }}
{{- if and $ref $ref.secretName }}
{{- if not (hasPrefix (upper $type) $suffix) }}
{{- fail (printf "credentials.sources.%s.%s: source %s has type %s" (toString $src.name) $field (toString $src.name) $type) }}
{{- end }}
{{- include "dedupe-proxy.secretEnvVar" (list (printf "DEDUPE_PROXY_SOURCES_%d_%s" $i $suffix) $ref) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $name, $_ := $c.sources | default dict }}
{{- if not (has $name $names) }}
{{- fail (printf "credentials.sources.%s: config.sources has no source named %s" $name $name) }}
{{- end }}
{{- end }}
{{- $refs := list }}
{{- range $src := .Values.config.sources | default list }}
{{- if eq (toString $src.type) "webhook" }}
{{- range $i, $ref := dig "webhook" "secrets" list $src }}
{{- $refs = append $refs (toString $ref) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $var, $ref := $c.webhookSecrets | default dict }}
{{- if not (has (printf "env:%s" $var) $refs) }}
{{- fail (printf "credentials.webhookSecrets.%s: no webhook source in config.sources lists env:%s in its secrets" $var $var) }}
{{- end }}
{{- include "dedupe-proxy.secretEnvVar" (list $var $ref) }}
{{- end }}
{{- $own := list }}
{{- range .Values.proxy.env | default list }}
{{- $own = append $own (toString .name) }}
{{- end }}
{{- range $refs }}
{{- $var := trimPrefix "env:" . }}
{{- if and (hasPrefix "env:" .) (not (hasKey ($c.webhookSecrets | default dict) $var)) (not (has $var $own)) (not $.Values.proxy.envFrom) }}
{{- fail (printf "a webhook source's secrets list %s, but nothing sets %s: name its Secret in credentials.webhookSecrets.%s (or set it with proxy.env / proxy.envFrom)" . $var $var) }}
{{- end }}
{{- end }}
{{- with .Values.proxy.env }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The webhook sources of config.sources, as a YAML list of {index, name,
port, path}; a listener the Service must reach cannot be loopback (nor
the proxy's default 127.0.0.1:8088).
*/}}
{{- define "dedupe-proxy.webhooks" -}}
{{- $out := list }}
{{- $ports := list }}
{{- range $i, $src := .Values.config.sources | default list }}
{{- if eq (toString $src.type) "webhook" }}
{{- $listen := dig "webhook" "listen" "127.0.0.1:8088" $src | toString }}
{{- $port := regexFind "[0-9]+$" $listen }}
{{- $host := trimSuffix (printf ":%s" $port) $listen }}
{{- if or (not $port) (eq $host $listen) }}
{{- fail (printf "config.sources[%d].webhook.listen must be host:port, got %q" $i $listen) }}
{{- end }}
{{- if has $host (list "127.0.0.1" "localhost" "[::1]") }}
{{- fail (printf "config.sources[%d].webhook.listen %q is loopback (the proxy's default): nothing outside the pod reaches it; set it, e.g. 0.0.0.0:%s" $i $listen $port) }}
{{- end }}
{{- if has $port $ports }}
{{- fail (printf "config.sources[%d].webhook.listen %q: another webhook source listens on port %s" $i $listen $port) }}
{{- end }}
{{- $ports = append $ports $port }}
{{- $out = append $out (dict "index" $i "name" (toString $src.name) "port" (atoi $port) "path" (dig "webhook" "path" "/webhook" $src)) }}
{{- end }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
In mode shared the chart renders no pod: a value that only configures the
chart's own pod would silently do nothing, so it fails the render.
*/}}
{{- define "dedupe-proxy.checkMode" -}}
{{- if not (has .Values.mode (list "deployment" "shared")) }}
{{- fail (printf "mode must be deployment or shared, got %q" .Values.mode) }}
{{- end }}
{{- if eq .Values.mode "shared" }}
{{- $c := .Values.credentials }}
{{- range $field := list "redisPassword" "redisUsername" "redisSentinelPassword" "redisSentinelUsername" "adminToken" "appUrl" "appHealthUrl" }}
{{- if dig $field "secretName" "" $c }}
{{- fail (printf "credentials.%s: mode shared renders no pod; put the variable in a Secret named by the workloads' dedupe-proxy.io/secrets annotation" $field) }}
{{- end }}
{{- end }}
{{- range $field, $v := dict "strategy" .Values.strategy "extraContainers" .Values.extraContainers "extraInitContainers" .Values.extraInitContainers "app.initContainers" .Values.app.initContainers }}
{{- if $v }}
{{- fail (printf "%s: mode shared renders no pod (nor Deployment); set it on the workloads that get the sidecar" $field) }}
{{- end }}
{{- end }}
{{- if or $c.sources $c.webhookSecrets }}
{{- fail "credentials.sources / credentials.webhookSecrets: mode shared renders no pod; put the variables in a Secret named by the workloads' dedupe-proxy.io/secrets annotation" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The dedupe-proxy container; in native sidecar mode it goes to
initContainers with restartPolicy: Always.
*/}}
{{- define "dedupe-proxy.proxyContainer" -}}
- name: dedupe-proxy
  image: {{ include "dedupe-proxy.proxyImage" . | quote }}
  imagePullPolicy: {{ .Values.proxy.image.pullPolicy }}
  {{- if .Values.proxy.nativeSidecar }}
  restartPolicy: Always
  {{- end }}
  args: ["run", "--config", "/etc/dedupe-proxy/config.yaml"]
  ports:
    - name: proxy-admin
      containerPort: {{ include "dedupe-proxy.adminPort" . }}
      protocol: TCP
    {{- range include "dedupe-proxy.webhooks" . | fromYamlArray }}
    - name: webhook-{{ .index }}
      containerPort: {{ .port }}
      protocol: TCP
    {{- end }}
  {{- $env := include "dedupe-proxy.proxyEnv" . | trim }}
  {{- if $env }}
  env:
    {{- $env | nindent 4 }}
  {{- end }}
  {{- with .Values.proxy.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: proxy-admin
    {{- with .Values.proxy.livenessProbe }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  readinessProbe:
    httpGet:
      path: {{ ternary "/readyz?deps=1" "/readyz" (eq .Values.proxy.readiness "deps") }}
      port: proxy-admin
    {{- with .Values.proxy.readinessProbe }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.proxy.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.proxy.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: dedupe-proxy-config
      mountPath: /etc/dedupe-proxy
      readOnly: true
    {{- with .Values.proxy.volumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
