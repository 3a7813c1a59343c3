{{/*
Names are fixed rather than derived from the release: the CRDs, the webhook
configuration and the conversion webhook's Service reference are cluster-wide,
so one Tusk serves a cluster. The operator finds these objects by name.
*/}}

{{- define "tusk.labels" -}}
app.kubernetes.io/name: tusk
app.kubernetes.io/part-of: tusk
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "tusk.selectorLabels" -}}
app.kubernetes.io/name: tusk
app.kubernetes.io/component: operator
{{- end }}

{{- define "tusk.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "tusk.selfManagedCerts" -}}
{{- if eq .Values.webhook.certificates "self" }}true{{ end }}
{{- end }}

{{/* The cert-manager Certificate whose CA the injector copies into caBundles. */}}
{{- define "tusk.certManager" -}}
{{- if eq .Values.webhook.certificates "certManager" }}true{{ end }}
{{- end }}

{{/* The Secret mounted at webhook.certDir, if the chart mounts one. */}}
{{- define "tusk.certSecret" -}}
{{- if eq .Values.webhook.certificates "certManager" }}tusk-webhook-cert
{{- else if eq .Values.webhook.certificates "external" }}{{ .Values.webhook.externalSecretName }}
{{- end }}
{{- end }}

{{- define "tusk.injectCaFrom" -}}
{{ .Release.Namespace }}/tusk-webhook
{{- end }}

{{- define "tusk.watchNamespaces" -}}
{{- if eq .Values.scope "namespaced" }}{{ join "," .Values.watchNamespaces }}{{ end }}
{{- end }}
