{{/* Names, labels and shared snippets of the kubejury chart. */}}

{{- define "kubejury.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubejury.fullname" -}}
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

{{- define "kubejury.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubejury.labels" -}}
helm.sh/chart: {{ include "kubejury.chart" . }}
{{ include "kubejury.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubejury
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kubejury.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubejury.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kubejury.operatorSelectorLabels" -}}
{{ include "kubejury.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "kubejury.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kubejury.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kubejury.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Namespaces the operator acts in: the watched ones, or only the release namespace's own objects. */}}
{{- define "kubejury.jobNamespaces" -}}
{{- $namespaces := list .Release.Namespace -}}
{{- range .Values.watchNamespaces -}}{{- $namespaces = append $namespaces . -}}{{- end -}}
{{- range .Values.jobs.serviceAccount.extraNamespaces -}}{{- $namespaces = append $namespaces . -}}{{- end -}}
{{- $namespaces | uniq | join "," -}}
{{- end -}}

{{- define "kubejury.modelCacheNamespaces" -}}
{{- $namespaces := list .Release.Namespace -}}
{{- range .Values.watchNamespaces -}}{{- $namespaces = append $namespaces . -}}{{- end -}}
{{- $namespaces | uniq | join "," -}}
{{- end -}}

{{- define "kubejury.webhookServiceName" -}}
{{- printf "%s-webhook" (include "kubejury.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubejury.webhookConfigurationName" -}}
{{- printf "%s.%s.kubejury.io" (include "kubejury.fullname" .) .Release.Namespace -}}
{{- end -}}

{{- define "kubejury.webhookCertSecret" -}}
{{- printf "%s-webhook-tls" (include "kubejury.fullname" .) -}}
{{- end -}}

{{/*
The "restricted" Pod Security Standard, container level: the operator, the Jobs and the test pod
all run with it.
*/}}
{{- define "kubejury.restrictedContainerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "kubejury.restrictedPodSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- /* When the chart-generated webhook certificate is renewed (issue 11, finding 8): a Unix time,
day-aligned so that every template rendering in one `helm upgrade` agrees. The existing Secret's
kubejury.io/renew-after while it lies in the future; else today + certValidityDays -
certRenewBeforeDays (a new certificate). */ -}}
{{- define "kubejury.webhookCertRenewAfter" -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "kubejury.webhookCertSecret" .) -}}
{{- $now := atoi (now | unixEpoch) -}}
{{- $kept := "" -}}
{{- if $existing -}}
{{- $at := index ((($existing.metadata).annotations) | default dict) "kubejury.io/renew-after" | default "" -}}
{{- if and $at (lt $now (atoi $at)) -}}{{- $kept = $at -}}{{- end -}}
{{- end -}}
{{- if $kept -}}
{{- $kept -}}
{{- else -}}
{{- add (mul (div $now 86400) 86400) (mul (sub (int .Values.webhook.certValidityDays) (int .Values.webhook.certRenewBeforeDays)) 86400) -}}
{{- end -}}
{{- end -}}
