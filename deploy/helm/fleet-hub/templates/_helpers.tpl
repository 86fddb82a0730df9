{{/*
Names are fixed, not derived from the release: the hub looks for its Lease, its webhook
certificate Secret and its webhook configuration by these names, and one hub runs per cluster.
*/}}
{{- define "fleet-hub.namespace" -}}
{{- if ne .Release.Namespace "fleet-system" -}}
{{- fail (printf "the hub runs in the namespace fleet-system, not %s: install with --namespace fleet-system --create-namespace" .Release.Namespace) -}}
{{- end -}}
fleet-system
{{- end -}}

{{/* Labels of an object named .name (the same as deploy/hub's, plus Helm's). */}}
{{- define "fleet-hub.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: fleet
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "fleet-hub.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
