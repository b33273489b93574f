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
