{{/* The release's full name, shortened to the 63 characters a name may have. */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "sluice.secretName" -}}
{{- .Values.secretName | default (include "sluice.fullname" .) -}}
{{- end -}}

{{/* Whether a URL names SQLite: empty (the default) or sqlite://. */}}
{{- define "sluice.isSQLite" -}}
{{- if or (eq . "") (hasPrefix "sqlite:" .) -}}true{{- end -}}
{{- end -}}

{{/*
The chart's refusals: SQLite lives in one pod's volume, so a second
replica would count and key on its own; the grace period must outlast
the 30 s drain.
*/}}
{{- define "sluice.validate" -}}
{{- $replicas := int .Values.replicas -}}
{{- if gt $replicas 1 -}}
{{- if include "sluice.isSQLite" (.Values.store | toString) -}}
{{- fail (printf "replicas: %d needs a shared store: SQLite counters live in one pod's volume; set store to redis://, redis-cluster:// or postgres://, or replicas to 1" $replicas) -}}
{{- end -}}
{{- if include "sluice.isSQLite" (.Values.database | toString) -}}
{{- fail (printf "replicas: %d needs a shared database: a SQLite catalog lives in one pod's volume; set database to postgres://, or replicas to 1" $replicas) -}}
{{- end -}}
{{- end -}}
{{- if le (int .Values.terminationGracePeriodSeconds) 30 -}}
{{- fail (printf "terminationGracePeriodSeconds: %v must be longer than sluice's 30 s drain" .Values.terminationGracePeriodSeconds) -}}
{{- end -}}
{{- end -}}

{{/* Whether the pod needs the data volume: SQLite for the store or the database. */}}
{{- define "sluice.usesSQLite" -}}
{{- if or (include "sluice.isSQLite" (.Values.store | toString)) (include "sluice.isSQLite" (.Values.database | toString)) -}}true{{- end -}}
{{- end -}}
