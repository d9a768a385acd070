{{- /*
Names, labels and small computed values shared by the templates.
Every define is namespaced "shadowsync." (helm best practice: defines are global
across a chart and its subcharts).
*/}}

{{- /* The chart name, or nameOverride. */}}
{{- define "shadowsync.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /*
The base of every object name: fullnameOverride, else the release name when it
already contains the chart name, else <release>-<chart>. Truncated so that the
longest suffix added ("-operator-leader-election", 25 characters) still fits a
63-character DNS label.
*/}}
{{- define "shadowsync.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 38 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 38 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 38 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- /* The operator's Deployment, ServiceAccount, (Cluster)Role and Lease name. */}}
{{- define "shadowsync.operatorName" -}}
{{- printf "%s-operator" (include "shadowsync.fullname" .) }}
{{- end }}

{{- define "shadowsync.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /* Labels on every object. */}}
{{- define "shadowsync.labels" -}}
helm.sh/chart: {{ include "shadowsync.chart" . }}
{{ include "shadowsync.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: shadowsync
{{- end }}

{{- /*
Stable selector labels (never change them in an upgrade: a Deployment's
selector is immutable).
*/}}
{{- define "shadowsync.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shadowsync.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- /*
The operator pods' selector. The component label keeps it from matching job
pods: the operator labels those app.kubernetes.io/name=shadowsync and
app.kubernetes.io/instance=<job name> with component trainer, ps or syncer.
*/}}
{{- define "shadowsync.operatorSelectorLabels" -}}
{{ include "shadowsync.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "shadowsync.operatorLabels" -}}
{{ include "shadowsync.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- /* `shadowsync serve` (serving.enabled): its name and labels. */}}
{{- define "shadowsync.servingName" -}}
{{- printf "%s-serve" (include "shadowsync.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "shadowsync.servingSelectorLabels" -}}
{{ include "shadowsync.selectorLabels" . }}
app.kubernetes.io/component: serve
{{- end }}

{{- define "shadowsync.servingLabels" -}}
{{ include "shadowsync.labels" . }}
app.kubernetes.io/component: serve
{{- end }}

{{- define "shadowsync.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "shadowsync.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- /* repository:tag, or repository@digest when a digest is set. */}}
{{- define "shadowsync.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}
{{- end }}

{{- define "shadowsync.jobImage" -}}
{{- default (include "shadowsync.image" .) .Values.operator.jobImage }}
{{- end }}

{{- define "shadowsync.leaseName" -}}
{{- default (include "shadowsync.operatorName" .) .Values.operator.leaderElection.leaseName }}
{{- end }}

{{- /*
Whether a Prometheus Operator object is rendered: the cluster serves
monitoring.coreos.com/v1, or the caller forces it (helm template sees no
cluster). Call with (dict "ctx" $ "cfg" .Values.serviceMonitor); "true" or "".
*/}}
{{- define "shadowsync.monitoringEnabled" -}}
{{- if and .cfg.enabled (or .cfg.force (.ctx.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}
true
{{- end }}
{{- end }}

{{- /* Mount paths of the TLS and token Secrets (fixed: docs/helm.md). */}}
{{- define "shadowsync.tlsDir" -}}/etc/shadowsync/tls{{- end }}
{{- define "shadowsync.credentialsKeyDir" -}}/etc/shadowsync/credentials-key{{- end }}

{{- /* The operator's TLS Secret: tls.secretName, else the one the chart makes. */}}
{{- define "shadowsync.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "shadowsync.fullname" .)) }}
{{- end }}

{{- /* The credentials key's Secret: credentials.existingSecret, else the chart's. */}}
{{- define "shadowsync.credentialsKeySecret" -}}
{{- .Values.credentials.existingSecret | default (printf "%s-credentials-key" (include "shadowsync.fullname" .)) }}
{{- end }}
{{- define "shadowsync.authDir" -}}/etc/shadowsync/auth{{- end }}

{{- /* The namespaces a namespaced operator watches, as a JSON array:
operator.watchNamespaces, else the release namespace. */}}
{{- define "shadowsync.watchNamespaces" -}}
{{- if .Values.operator.watchNamespaces }}{{ toJson .Values.operator.watchNamespaces }}{{ else }}{{ list .Release.Namespace | toJson }}{{ end }}
{{- end }}
