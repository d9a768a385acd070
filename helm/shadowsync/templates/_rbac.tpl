{{- /*
The operator's permissions on the jobs and their children (deploy/rbac.yaml's
ClusterRole "shadowsync-operator"), shared by the ClusterRole (watchScope
cluster) and the namespaced Role (watchScope namespace). Least privilege: it
watches ShadowSyncJobs and writes their status, server-side-applies and deletes
the children Reconcile renders (StatefulSets, Services, ConfigMaps,
NetworkPolicies, PodDisruptionBudgets), creates each job's credentials Secret
(never reads one), reads pods, and records events. No wildcards.
*/}}
{{- define "shadowsync.operatorRules" -}}
# The jobs: watched; deleted when ttlSecondsAfterFinished expires.
- apiGroups: ["shadowsync.io"]
  resources: ["shadowsyncjobs"]
  verbs: ["get", "list", "watch", "delete"]
# The status is written with merge patches only. (kubectl scale and HPAs
# use the scale subresource; the operator never does.)
- apiGroups: ["shadowsync.io"]
  resources: ["shadowsyncjobs/status"]
  verbs: ["patch"]
# Children carry ownerReferences with blockOwnerDeletion: true; with the
# OwnerReferencesPermissionEnforcement admission plugin that needs this.
- apiGroups: ["shadowsync.io"]
  resources: ["shadowsyncjobs/finalizers"]
  verbs: ["update"]
# The children: watched, created, merge-patched and deleted (never PUT).
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# A job's NetworkPolicy (who may reach its servers) and its parameter
# servers' PodDisruptionBudget.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# A job's PodGroup, with operator.gangScheduler (Volcano's or scheduler-plugins').
- apiGroups: ["scheduling.volcano.sh", "scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Each job's credentials Secret (<job>-credentials, docs/security.md): only
# created, never read, listed or changed (its tokens are derived from the
# operator's key, so it never needs them back); deleted with its job by
# ownerReferences.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create"]
# The export claim a job with spec.export and no volumeClaimName gets;
# it is created once and kept after the job (docs/export.md).
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "create"]
# Pods are read for phases, readiness, restarts and trainer completion; the
# StatefulSet controller creates and deletes them.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
