{{/* Name of the release's objects: the release name, or release-aiprof when it does not say aiprof. */}}
{{- define "aiprof.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "aiprof.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "aiprof.labels" -}}
{{ include "aiprof.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: aiprof
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "aiprof.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-controller" (include "aiprof.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "aiprof.controllerImage" -}}
{{- printf "%s:%s" .Values.controller.image.repository (default .Chart.AppVersion .Values.controller.image.tag) -}}
{{- end -}}

{{- define "aiprof.injectorImage" -}}
{{- printf "%s:%s" .Values.injector.image.repository (default .Chart.AppVersion .Values.injector.image.tag) -}}
{{- end -}}

{{/* Where injector and merge pods run (--injector-namespace): a namespace of their own that
admits privileged pods, apart from the controller's restricted one and out of the tenants' reach. */}}
{{- define "aiprof.injectorNamespace" -}}
{{- default (printf "%s-injectors" .Release.Namespace | trunc 63 | trimSuffix "-") .Values.injector.namespace -}}
{{- end -}}
