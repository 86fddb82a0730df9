{{/*
Names are fixed, not derived from the release: the agent's Lease, ConfigMap and hub
credentials are found by these names, and one agent runs per member cluster.
*/}}
{{- define "fleet-agent.namespace" -}}
{{- if ne .Release.Namespace "fleet-system" -}}
{{- fail (printf "the agent runs in the namespace fleet-system, not %s: install with --namespace fleet-system --create-namespace" .Release.Namespace) -}}
{{- end -}}
fleet-system
{{- end -}}

{{/* Labels of an object named .name (the same as deploy/agent's, plus Helm's). */}}
{{- define "fleet-agent.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: fleet
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "fleet-agent.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
