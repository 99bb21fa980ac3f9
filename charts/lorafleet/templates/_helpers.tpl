{{/* Common names and labels (nameOverride, fullnameOverride: the conventional keys). */}}
{{- define "lorafleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lorafleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "lorafleet.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "lorafleet.labels" -}}
app.kubernetes.io/name: {{ include "lorafleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "lorafleet.selector" -}}
app.kubernetes.io/name: {{ include "lorafleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* image.digest, when set, pins the image (the tag is then only for people reading it). */}}
{{- define "lorafleet.image" -}}
{{- if .Values.image.digest -}}
{{ printf "%s@%s" .Values.image.repository .Values.image.digest | quote }}
{{- else -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
{{- end -}}
{{- end -}}

{{/* Labels of a monitoring object: the shared monitoring.labels plus its own extras. */}}
{{- define "lorafleet.monitoringLabels" -}}
{{- include "lorafleet.labels" .root }}
{{- with .root.Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Pod and container security of the control-plane pods (operator, gateway, canary): the values
podSecurityContext and securityContext. The defaults are the image's non-root user and
Kubernetes' "restricted" profile; on OpenShift leave runAsUser, runAsGroup and fsGroup out
(ci/openshift-values.yaml) so restricted-v2 assigns them from the namespace's range.
*/}}
{{- define "lorafleet.podSecurity" -}}
securityContext: {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{- define "lorafleet.containerSecurity" -}}
securityContext: {{- toYaml .Values.securityContext | nindent 2 }}
{{- end -}}

{{/* Scheduling and pull secrets of a component's pods; `.c` is its values (operator/gateway). */}}
{{- define "lorafleet.podPlacement" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/*
The agents' internal credential as a caller (gateway, operator) sends it. tokenReview: a
projected ServiceAccount token for the agents' audience, in a file the kubelet rewrites before
it expires (the callers re-read it when it changes); secret: the pool Secret's shared token,
also a mounted file.
`prefix` is the component's env prefix.
*/}}
{{- define "lorafleet.agentTokenDir" -}}/var/run/secrets/lorafleet/agent-token{{- end -}}

{{- define "lorafleet.agentTokenEnv" -}}
{{- if eq .root.Values.internalAuth.mode "tokenReview" }}
- {name: {{ .prefix }}REPLICA_TOKEN_FILE, value: {{ include "lorafleet.agentTokenDir" .root }}/token}
{{- else }}
- {name: {{ .prefix }}REPLICA_TOKEN_FILE, value: {{ include "lorafleet.internalSecretDir" .root }}/agent-token}
{{- end }}
{{- end -}}

{{/*
The agents' data-port token (lorafleet_agent.data_auth): a shared secret in every mode (the
data path must not wait on the API server), the pool Secret's `data-token`. The gateway sends
it with each completion; the operator holds it only to copy it into the Secrets of merged
pools it creates.
*/}}
{{- define "lorafleet.dataTokenEnv" -}}
- {name: {{ .prefix }}REPLICA_DATA_TOKEN_FILE, value: {{ include "lorafleet.internalSecretDir" .root }}/data-token}
{{- end -}}

{{/*
The gateway pool's inside Secret, `<gateway.pool>-internal`. The chart never renders it: a
render holds no token, so two renders are identical (Argo CD, `helm template`). The operator
creates it when it is missing (LORAFLEET_OPERATOR_INTERNAL_SECRET), unless
internalSecret.existingSecret says you create it. The gateway and the operator mount it as
files (optional: they start before it exists) and re-read a file when the kubelet rewrites it,
so a created or rotated Secret reaches them without a restart.
*/}}
{{- define "lorafleet.internalSecretName" -}}{{ printf "%s-internal" .Values.gateway.pool }}{{- end -}}
{{- define "lorafleet.internalSecretDir" -}}/var/run/secrets/lorafleet/internal{{- end -}}

{{- define "lorafleet.internalSecretMount" -}}
- {name: pool-secret, mountPath: {{ include "lorafleet.internalSecretDir" . }}, readOnly: true}
{{- end -}}

{{- define "lorafleet.internalSecretVolume" -}}
- name: pool-secret
  secret:
    secretName: {{ include "lorafleet.internalSecretName" . | quote }}
    optional: true
    items:
      - {key: agent-token, path: agent-token}
      - {key: data-token, path: data-token}
{{- end -}}

{{- define "lorafleet.agentTokenMount" -}}
{{- if eq .Values.internalAuth.mode "tokenReview" }}
- {name: agent-token, mountPath: {{ include "lorafleet.agentTokenDir" . }}, readOnly: true}
{{- end }}
{{- end -}}

{{- define "lorafleet.agentTokenVolume" -}}
{{- if eq .Values.internalAuth.mode "tokenReview" }}
- name: agent-token
  projected:
    sources:
      - serviceAccountToken:
          audience: {{ .Values.internalAuth.audience | quote }}
          expirationSeconds: {{ .Values.internalAuth.tokenExpirationSeconds }}
          path: token
{{- end }}
{{- end -}}

{{/* The ServiceAccounts whose tokens the agents accept (tokenReview): gateway and operator. */}}
{{- define "lorafleet.agentCallers" -}}
{{- $ns := .Release.Namespace -}}
{{- $name := include "lorafleet.fullname" . -}}
{{- printf "%s:%s-gateway,%s:%s-operator" $ns $name $ns $name -}}
{{- end -}}

{{/*
A container's env: the chart's own variables ("own", rendered YAML), then "extra" (a
component's extraEnv). Kubernetes lets the last of two same-named variables win, so an
extraEnv entry could silently replace what the chart derives from its values (the ports,
the internal credential, the auth mode of the replicas...). Such a name is refused at render;
extraEnv is for settings the chart does not set (docs/guides/deploy.md#extra-environment-variables).
*/}}
{{- define "lorafleet.env" }}
{{- $own := list }}
{{- range regexFindAll "(?m)^- (\\{name: |name: )[A-Za-z_][A-Za-z0-9_.-]*" .own -1 }}
{{- $name := regexReplaceAll "^- (\\{name: |name: )" . "" }}
{{- $own = append $own $name }}
{{- /* X beside the chart's X_FILE: the settings take a set value before the file. */}}
{{- if hasSuffix "_FILE" $name }}
{{- $own = append $own (trimSuffix "_FILE" $name) }}
{{- end }}
{{- end }}
{{- range .extra }}
{{- if has .name $own }}
{{- fail (printf "%s sets %s, which the chart already sets from its own values; set the chart value instead (docs/guides/deploy.md#extra-environment-variables)" $.path .name) }}
{{- end }}
{{- end }}
{{- .own | trim }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The replica agents' ServiceAccount: serviceAccount.agent.name, else <fullname>-agent. */}}
{{- define "lorafleet.agentServiceAccount" -}}
{{- .Values.serviceAccount.agent.name | default (printf "%s-agent" (include "lorafleet.fullname" .)) -}}
{{- end -}}

{{/*
The accounts that get the agents' permissions (TokenReview of callers, Events): the agents'
own and each pool's own account (serviceAccount.agent.extraAccounts, e.g. one with a cloud
identity for the object store). Without them an agent in tokenReview mode refuses every load.
*/}}
{{- define "lorafleet.agentSubjects" -}}
- {kind: ServiceAccount, name: {{ include "lorafleet.agentServiceAccount" . | quote }}, namespace: {{ .Release.Namespace | quote }}}
{{- range .Values.serviceAccount.agent.extraAccounts }}
- {kind: ServiceAccount, name: {{ . | quote }}, namespace: {{ $.Release.Namespace | quote }}}
{{- end }}
{{- end -}}

{{/* scrapeTimeout and metricRelabelings shared by the chart's ServiceMonitor and PodMonitor endpoints. */}}
{{- define "lorafleet.scrapeExtras" -}}
{{- with .Values.monitoring.scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- with .Values.monitoring.metricRelabelings }}
metricRelabelings: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
