{{- define "ballast.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ballast.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ballast.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ballast.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ballast.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ballast.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: controller
app.kubernetes.io/part-of: ballast
{{- end -}}

{{- define "ballast.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ballast.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ballast.lagJobName" -}}
{{- printf "%s-lag-job" (include "ballast.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ballast.lagJobLabels" -}}
{{ include "ballast.labels" . | replace "app.kubernetes.io/component: controller" "app.kubernetes.io/component: lag-job" }}
{{- end -}}

{{- define "ballast.lagJobImage" -}}
{{- printf "%s:%s" .Values.lagJob.image.repository (.Values.lagJob.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- /* A generated credential's value: the one already stored (kept across upgrades), or
a new random one on install. */ -}}
{{- define "ballast.keptSecret" -}}
{{- $existing := lookup "v1" "Secret" .namespace .name -}}
{{- if and $existing (hasKey ($existing.data | default dict) .key) -}}
{{- index $existing.data .key -}}
{{- else -}}
{{- randAlphaNum 40 | b64enc -}}
{{- end -}}
{{- end -}}

{{- define "ballast.mqttSecretName" -}}
{{- .Values.mqttPassword.secretName | default (printf "%s-mqtt" (include "ballast.fullname" .)) -}}
{{- end -}}

{{- define "ballast.adminSecretName" -}}
{{- .Values.adminToken.secretName | default (printf "%s-admin" (include "ballast.fullname" .)) -}}
{{- end -}}

{{- define "ballast.metricsPort" -}}
{{- if .Values.config.http.metrics_port -}}metrics{{- else -}}http{{- end -}}
{{- end -}}

{{- define "ballast.unsigned" -}}
{{- if eq (toString ((.Values.config.signing | default dict).required)) "false" -}}true{{- end -}}
{{- end -}}
