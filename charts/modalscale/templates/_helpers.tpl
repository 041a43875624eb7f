{{/* Chart name, truncated to the 63 characters of a label value. */}}
{{- define "modalscale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects: <release>-<chart>, or the release alone when it holds the chart name. */}}
{{- define "modalscale.fullname" -}}
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

{{/* "<fullname>-<suffix>" within 63 characters: the full name is cut, never the suffix, so that the objects named
after one release (the ConfigMaps -dashboard, -kube-state-metrics, -pricing, -showback-rules; the PodMonitors
-inferenceservices, -gateways, -image-encoders) keep names of their own however long the release name is.
Call as (include "modalscale.suffixedName" (list . "dashboard")). */}}
{{- define "modalscale.suffixedName" -}}
{{- $root := index . 0 }}
{{- $suffix := index . 1 }}
{{- printf "%s-%s" (include "modalscale.fullname" $root | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix }}
{{- end }}

{{- define "modalscale.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "modalscale.labels" -}}
helm.sh/chart: {{ include "modalscale.chart" . }}
{{ include "modalscale.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: modalscale
{{- end }}

{{/* Labels that select the operator pods (immutable in the Deployment selector). */}}
{{- define "modalscale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "modalscale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "modalscale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "modalscale.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The kopf peering object's name (MODALSCALE_PEERING_NAME). */}}
{{- define "modalscale.peeringName" -}}
{{- default (include "modalscale.fullname" .) .Values.config.peeringName }}
{{- end }}

{{/* Name of the ConfigMap holding the pricing catalog override, empty when there is none. */}}
{{- define "modalscale.pricingConfigMap" -}}
{{- if .Values.pricingCatalog.existingConfigMap }}
{{- .Values.pricingCatalog.existingConfigMap }}
{{- else if .Values.pricingCatalog.overrides }}
{{- include "modalscale.suffixedName" (list . "pricing") }}
{{- end }}
{{- end }}

{{/* Where the catalog override is mounted in the container. */}}
{{- define "modalscale.pricingMountDir" -}}
/etc/modalscale/pricing
{{- end }}

{{/* The operator image reference: <repository>:<tag>, or <repository>@sha256:<hex> when image.tag is a digest
("sha256:<hex>" or "@sha256:<hex>", both accepted by values.schema.json); "<repository>:sha256:<hex>" is no image
reference (the kubelet answers InvalidImageName). */}}
{{- define "modalscale.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if hasPrefix "sha256:" (trimPrefix "@" $tag) }}
{{- printf "%s@%s" .Values.image.repository (trimPrefix "@" $tag) }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The names of .Values.imagePullSecrets, comma-separated: the gateway pods (the operator's image, in each
InferenceService's namespace) pull with the same Secrets (MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS).
*/}}
{{- define "modalscale.pullSecretNames" -}}
{{- $names := list -}}
{{- range .Values.imagePullSecrets -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- join "," $names -}}
{{- end -}}
