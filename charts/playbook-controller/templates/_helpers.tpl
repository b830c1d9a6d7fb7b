{{/* Names, labels and images shared by every template. */}}

{{- define "playbook-controller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release name + chart name, unless the release name already holds the chart name. */}}
{{- define "playbook-controller.fullname" -}}
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

{{- define "playbook-controller.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "playbook-controller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "playbook-controller.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "playbook-controller.labels" -}}
{{ include "playbook-controller.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: playbook-controller
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "playbook-controller.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "playbook-controller.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* registry/repository:tag, or @digest when a digest is set. */}}
{{- define "playbook-controller.image" -}}
{{- $repository := .Values.image.repository -}}
{{- if .Values.image.registry -}}
{{- $repository = printf "%s/%s" .Values.image.registry .Values.image.repository -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Whether the monitoring.coreos.com/v1 API can take a ServiceMonitor or PrometheusRule. */}}
{{- define "playbook-controller.hasMonitoringApi" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/*
The V8 old space for the container's memory limit (Mi or Gi): half of what the limit leaves above
the 64 MiB Node needs outside its heap (96 for 256Mi). Capped, V8 collects before the heap grows
past what the objects need; uncapped, it kept three times their size.
*/}}
{{- define "playbook-controller.heapMiB" -}}
{{- $limit := "" -}}
{{- with .Values.resources }}{{ with .limits }}{{ with .memory }}{{ $limit = toString . }}{{ end }}{{ end }}{{ end -}}
{{- $mib := 0 -}}
{{- if hasSuffix "Gi" $limit -}}
{{- $mib = mul (trimSuffix "Gi" $limit | atoi) 1024 -}}
{{- else if hasSuffix "Mi" $limit -}}
{{- $mib = trimSuffix "Mi" $limit | atoi -}}
{{- end -}}
{{- if gt $mib 64 -}}
{{- div (sub $mib 64) 2 -}}
{{- end -}}
{{- end -}}

{{/* What the controller does with Playbooks, their pods and events: every verb listed, nothing else. */}}
{{- define "playbook-controller.rules" }}
rules:
  - apiGroups: [playbook.dev]
    resources: [playbooks]
    # Read from the watch cache; CronPlaybook runs are created, read after an AlreadyExists,
    # cancelled (concurrencyPolicy Replace) and deleted past their history limits; patch also puts
    # the log archive's finalizer (playbook.dev/log-archive) on and takes it off.
    verbs: [list, watch, get, create, patch, delete]
  - apiGroups: [playbook.dev]
    resources: [playbooks/status]
    verbs: [update]
  # Pods it creates carry an owner reference with blockOwnerDeletion.
  - apiGroups: [playbook.dev]
    resources: [playbooks/finalizers]
    verbs: [update]
  # CronPlaybooks: read from the watch cache, their status written; their runs carry an owner
  # reference with blockOwnerDeletion.
  - apiGroups: [playbook.dev]
    resources: [cronplaybooks]
    verbs: [list, watch]
  - apiGroups: [playbook.dev]
    resources: [cronplaybooks/status, cronplaybooks/finalizers]
    verbs: [update]
  # The namespaces' PlaybookPolicies: read from the watch cache, their status written.
  - apiGroups: [playbook.dev]
    resources: [playbookpolicies]
    verbs: [list, watch]
  - apiGroups: [playbook.dev]
    resources: [playbookpolicies/status]
    verbs: [update]
  # patch: a cancel lowers a pod's activeDeadlineSeconds; the controller's finalizer on a pod that
  # goes through Kueue (playbook.dev/read-before-delete) comes off once its end is read.
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list, watch, create, delete, patch]
  # Live progress: the runner container's log of a running run's pod (--progress-interval).
  - apiGroups: [""]
    resources: [pods/log]
    verbs: [get]
  # A pod that mounts its service account's token in its task containers is made without it
  # when the account says automountServiceAccountToken: false.
  - apiGroups: [""]
    resources: [serviceaccounts]
    verbs: [get]
  # A repeat of an event patches its count and lastTimestamp; a pod waiting for its volumes has
  # its FailedMount events listed (a missing Secret or ConfigMap volume is said there alone).
  - apiGroups: [""]
    resources: [events]
    verbs: [create, patch, list]
{{- if and .Values.logArchive.enabled (eq .Values.logArchive.upload "runner") }}
  # The log archive's upload Secret of each attempt (its runner's presigned URLs), made before
  # its pod and deleted once its log is composed.
  - apiGroups: [""]
    resources: [secrets]
    verbs: [create, delete]
{{- end }}
{{- if .Values.config.kueue }}
  # --kueue: Kueue's Workloads of the runs' pods, read from the watch cache for Kueue's words.
  - apiGroups: [kueue.x-k8s.io]
    resources: [workloads]
    verbs: [get, list, watch]
{{- end }}
{{- end }}
