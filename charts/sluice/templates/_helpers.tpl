{{- define "sluice.fullname" -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sluice.labels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The operator's pods: the Deployment's selector (immutable: never change it), the metrics
Service's and the PodDisruptionBudget's. No other pod of the chart carries both labels. */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.webhookServiceName" -}}
{{- printf "%s-webhook" (include "sluice.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* the Secret holding the webhook's serving certificate, if any (empty: self-signed) */}}
{{- define "sluice.webhookSecret" -}}
{{- if .Values.webhook.certificateSecret -}}
{{- .Values.webhook.certificateSecret -}}
{{- else if .Values.webhook.certManager.enabled -}}
{{- printf "%s-tls" (include "sluice.webhookServiceName" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* the Secret the operator keeps its self-signed webhook certificate in (no certificate given) */}}
{{- define "sluice.webhookOwnSecret" -}}
{{- printf "%s-webhook-certs" (include "sluice.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.metricsServiceName" -}}
{{- printf "%s-metrics" (include "sluice.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString (.Values.image.tag | default .Chart.AppVersion)) -}}
{{- end -}}

{{/* What the operator needs in every namespace it watches: in the ClusterRole when it watches all
namespaces, in a Role per watched namespace otherwise (rbac.yaml). */}}
{{- define "sluice.namespacedRules" -}}
- apiGroups: ["sluice.dev"]
  resources: ["streamingqueries", "queryclusters"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["sluice.dev"]
  resources: ["streamingqueries/status", "queryclusters/status", "streamingqueries/finalizers",
              "queryclusters/finalizers"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Secrets: the Kafka credentials a QueryCluster names (kafka.tls, kafka.sasl)
- apiGroups: [""]
  resources: ["configmaps", "services", "serviceaccounts", "persistentvolumeclaims", "secrets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# Pods: the operator reads its drivers' pods; the rest is what a query's driver Role grants
# (sluice.operator.builders.rbac: with executors, Spark's executor pods; always, pods/status patch,
# with which a driver labels its own pod). RBAC lets the operator grant only what it holds itself
# in that namespace; the driver Role's ConfigMap, claim and Lease verbs are among the rules above
# and below.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["create", "get", "list", "watch", "delete", "deletecollection", "patch"]
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
# the driver Deployments (active and standby drivers of each query)
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# the operator's own leader election (cluster-wide mode), and each query's driver Lease (created by
# the operator before its drivers start, watched for takeovers, annotated with hand-off requests;
# its drivers' Role grants get, list, watch and update of that Lease by name)
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  # delete: a replace with backfill removes its own Lease with its workload
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
{{- end -}}

{{/* Cluster-scoped objects, read only: nothing in them is namespaced, so no Role can grant them.
kopf lists and watches the CRDs (a new or changed CRD is noticed without a restart) and, when it
watches given namespaces, the namespaces (a watched namespace deleted and created again is picked
up); without these it falls back to what it saw at start and logs warnings. Names and CRD schemas
only: no Secret, no object of any query. */}}
{{- define "sluice.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
{{- if .Values.webhook.enabled }}
# the admission webhook's configuration, which the leading replica publishes and withdraws
- apiGroups: ["admissionregistration.k8s.io"]
  resources: ["validatingwebhookconfigurations"]
  verbs: ["create"]
- apiGroups: ["admissionregistration.k8s.io"]
  resources: ["validatingwebhookconfigurations"]
  resourceNames: [{{ include "sluice.fullname" . | quote }}]
  verbs: ["get", "patch"]
{{- end }}
{{- end -}}

{{/* restricted Pod Security Standard, for every container of the chart */}}
{{- define "sluice.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities: {drop: ["ALL"]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "sluice.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
seccompProfile: {type: RuntimeDefault}
{{- end -}}
