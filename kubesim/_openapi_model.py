"""The shape of the built-in kinds kubesim serves, for the OpenAPI documents it publishes.

A real API server generates its OpenAPI from the Go types; kubesim keeps this outline instead:
one line per type, ``Type: field field:type ...``, where a field's type is a scalar
(``string``, the default; ``integer``, ``boolean``, ``number``), another type of the outline
(``core.Container``), ``[]T`` for a list, ``{}T`` for a map with values of T, or ``object``
for free-form JSON. The outline names every field that holds an object or a list, which is
what a client computing a strategic merge patch walks (kubectl looks a field up whenever the
two sides differ there); the scalars are the common ones. How lists and maps merge is not
written here: ``_openapi`` asks ``_schema`` (the table kubesim's own patching uses) for each
field, so what the documents say and what kubesim does cannot drift apart.
"""

from __future__ import annotations

from typing import Final

__all__ = ["GROUP_PREFIXES", "KIND_TYPES", "TYPES"]

#: The outline's short group -> the prefix of a definition's name, as the API server names them.
GROUP_PREFIXES: Final = {
    "meta": "io.k8s.apimachinery.pkg.apis.meta.v1",
    "core": "io.k8s.api.core.v1",
    "apps": "io.k8s.api.apps.v1",
    "batch": "io.k8s.api.batch.v1",
    "networking": "io.k8s.api.networking.v1",
    "autoscaling": "io.k8s.api.autoscaling.v2",
    "rbac": "io.k8s.api.rbac.v1",
    "apiextensions": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1",
}

#: (group, kind) of every built-in kind kubesim serves -> its type in the outline.
KIND_TYPES: Final = {
    ("", "Namespace"): "core.Namespace",
    ("", "Pod"): "core.Pod",
    ("", "Service"): "core.Service",
    ("", "ConfigMap"): "core.ConfigMap",
    ("", "Secret"): "core.Secret",
    ("", "ServiceAccount"): "core.ServiceAccount",
    ("", "PersistentVolumeClaim"): "core.PersistentVolumeClaim",
    ("", "Event"): "core.Event",
    ("apps", "Deployment"): "apps.Deployment",
    ("apps", "ReplicaSet"): "apps.ReplicaSet",
    ("apps", "StatefulSet"): "apps.StatefulSet",
    ("apps", "DaemonSet"): "apps.DaemonSet",
    ("apps", "ControllerRevision"): "apps.ControllerRevision",
    ("batch", "Job"): "batch.Job",
    ("batch", "CronJob"): "batch.CronJob",
    ("networking.k8s.io", "Ingress"): "networking.Ingress",
    ("networking.k8s.io", "NetworkPolicy"): "networking.NetworkPolicy",
    ("autoscaling", "HorizontalPodAutoscaler"): "autoscaling.HorizontalPodAutoscaler",
    ("rbac.authorization.k8s.io", "Role"): "rbac.Role",
    ("rbac.authorization.k8s.io", "RoleBinding"): "rbac.RoleBinding",
    ("rbac.authorization.k8s.io", "ClusterRole"): "rbac.ClusterRole",
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): "rbac.ClusterRoleBinding",
    ("apiextensions.k8s.io", "CustomResourceDefinition"): "apiextensions.CustomResourceDefinition",
}

_OUTLINE = """
meta.ObjectMeta: name generateName namespace uid resourceVersion generation:integer
  creationTimestamp deletionTimestamp deletionGracePeriodSeconds:integer labels:{}string
  annotations:{}string ownerReferences:[]meta.OwnerReference finalizers:[]string
  managedFields:[]meta.ManagedFieldsEntry
meta.OwnerReference: apiVersion kind name uid controller:boolean blockOwnerDeletion:boolean
meta.ManagedFieldsEntry: manager operation apiVersion time fieldsType fieldsV1:object subresource
meta.LabelSelector: matchLabels:{}string matchExpressions:[]meta.LabelSelectorRequirement
meta.LabelSelectorRequirement: key operator values:[]string
meta.Condition: type status observedGeneration:integer lastTransitionTime reason message

core.Namespace: apiVersion kind metadata:meta.ObjectMeta spec:core.NamespaceSpec
  status:core.NamespaceStatus
core.NamespaceSpec: finalizers:[]string
core.NamespaceStatus: phase conditions:[]core.Condition
core.Condition: type status lastProbeTime lastHeartbeatTime lastUpdateTime lastTransitionTime
  reason message
core.Pod: apiVersion kind metadata:meta.ObjectMeta spec:core.PodSpec status:core.PodStatus
core.PodTemplateSpec: metadata:meta.ObjectMeta spec:core.PodSpec
core.PodSpec: volumes:[]core.Volume initContainers:[]core.Container
  containers:[]core.Container ephemeralContainers:[]core.Container restartPolicy
  terminationGracePeriodSeconds:integer activeDeadlineSeconds:integer dnsPolicy
  nodeSelector:{}string serviceAccountName serviceAccount
  automountServiceAccountToken:boolean nodeName hostNetwork:boolean hostPID:boolean
  hostIPC:boolean shareProcessNamespace:boolean securityContext:core.PodSecurityContext
  imagePullSecrets:[]core.LocalObjectReference hostname subdomain affinity:core.Affinity
  schedulerName tolerations:[]core.Toleration hostAliases:[]core.HostAlias
  priorityClassName priority:integer dnsConfig:core.PodDNSConfig
  readinessGates:[]core.PodReadinessGate runtimeClassName enableServiceLinks:boolean
  preemptionPolicy overhead:{}string topologySpreadConstraints:[]core.TopologySpreadConstraint
  setHostnameAsFQDN:boolean os:core.PodOS hostUsers:boolean
  schedulingGates:[]core.PodSchedulingGate resourceClaims:[]core.PodResourceClaim
core.Container: name image command:[]string args:[]string workingDir
  ports:[]core.ContainerPort envFrom:[]core.EnvFromSource env:[]core.EnvVar
  resources:core.ResourceRequirements resizePolicy:[]core.ContainerResizePolicy
  restartPolicy volumeMounts:[]core.VolumeMount volumeDevices:[]core.VolumeDevice
  livenessProbe:core.Probe readinessProbe:core.Probe startupProbe:core.Probe
  lifecycle:core.Lifecycle terminationMessagePath terminationMessagePolicy imagePullPolicy
  securityContext:core.SecurityContext stdin:boolean stdinOnce:boolean tty:boolean
  targetContainerName
core.ContainerPort: name hostPort:integer containerPort:integer protocol hostIP
core.EnvVar: name value valueFrom:core.EnvVarSource
core.EnvVarSource: fieldRef:core.ObjectFieldSelector resourceFieldRef:core.ResourceFieldSelector
  configMapKeyRef:core.KeySelector secretKeyRef:core.KeySelector
core.ObjectFieldSelector: apiVersion fieldPath
core.ResourceFieldSelector: containerName resource divisor
core.KeySelector: name key optional:boolean
core.EnvFromSource: prefix configMapRef:core.EnvSource secretRef:core.EnvSource
core.EnvSource: name optional:boolean
core.ResourceRequirements: limits:{}string requests:{}string claims:[]core.ResourceClaim
core.ResourceClaim: name request
core.ContainerResizePolicy: resourceName restartPolicy
core.VolumeMount: name readOnly:boolean recursiveReadOnly mountPath subPath mountPropagation
  subPathExpr
core.VolumeDevice: name devicePath
core.Probe: exec:core.ExecAction httpGet:core.HTTPGetAction tcpSocket:core.TCPSocketAction
  grpc:core.GRPCAction initialDelaySeconds:integer timeoutSeconds:integer
  periodSeconds:integer successThreshold:integer failureThreshold:integer
  terminationGracePeriodSeconds:integer
core.ExecAction: command:[]string
core.HTTPGetAction: path port host scheme httpHeaders:[]core.HTTPHeader
core.HTTPHeader: name value
core.TCPSocketAction: port host
core.GRPCAction: port:integer service
core.Lifecycle: postStart:core.LifecycleHandler preStop:core.LifecycleHandler stopSignal
core.LifecycleHandler: exec:core.ExecAction httpGet:core.HTTPGetAction
  tcpSocket:core.TCPSocketAction sleep:core.SleepAction
core.SleepAction: seconds:integer
core.SecurityContext: capabilities:core.Capabilities privileged:boolean
  seLinuxOptions:core.SELinuxOptions windowsOptions:core.WindowsSecurityContextOptions
  runAsUser:integer runAsGroup:integer runAsNonRoot:boolean readOnlyRootFilesystem:boolean
  allowPrivilegeEscalation:boolean procMount seccompProfile:core.SeccompProfile
  appArmorProfile:core.SeccompProfile
core.Capabilities: add:[]string drop:[]string
core.SELinuxOptions: user role type level
core.WindowsSecurityContextOptions: gmsaCredentialSpecName gmsaCredentialSpec runAsUserName
  hostProcess:boolean
core.SeccompProfile: type localhostProfile
core.PodSecurityContext: seLinuxOptions:core.SELinuxOptions
  windowsOptions:core.WindowsSecurityContextOptions runAsUser:integer runAsGroup:integer
  runAsNonRoot:boolean supplementalGroups:[]integer supplementalGroupsPolicy fsGroup:integer
  sysctls:[]core.Sysctl fsGroupChangePolicy seccompProfile:core.SeccompProfile
  appArmorProfile:core.SeccompProfile seLinuxChangePolicy
core.Sysctl: name value
core.LocalObjectReference: name
core.Affinity: nodeAffinity:core.NodeAffinity podAffinity:core.PodAffinity
  podAntiAffinity:core.PodAffinity
core.NodeAffinity: requiredDuringSchedulingIgnoredDuringExecution:core.NodeSelector
  preferredDuringSchedulingIgnoredDuringExecution:[]core.PreferredSchedulingTerm
core.NodeSelector: nodeSelectorTerms:[]core.NodeSelectorTerm
core.NodeSelectorTerm: matchExpressions:[]core.NodeSelectorRequirement
  matchFields:[]core.NodeSelectorRequirement
core.NodeSelectorRequirement: key operator values:[]string
core.PreferredSchedulingTerm: weight:integer preference:core.NodeSelectorTerm
core.PodAffinity: requiredDuringSchedulingIgnoredDuringExecution:[]core.PodAffinityTerm
  preferredDuringSchedulingIgnoredDuringExecution:[]core.WeightedPodAffinityTerm
core.PodAffinityTerm: labelSelector:meta.LabelSelector namespaceSelector:meta.LabelSelector
  namespaces:[]string topologyKey matchLabelKeys:[]string mismatchLabelKeys:[]string
core.WeightedPodAffinityTerm: weight:integer podAffinityTerm:core.PodAffinityTerm
core.Toleration: key operator value effect tolerationSeconds:integer
core.HostAlias: ip hostnames:[]string
core.PodDNSConfig: nameservers:[]string searches:[]string options:[]core.PodDNSConfigOption
core.PodDNSConfigOption: name value
core.PodReadinessGate: conditionType
core.TopologySpreadConstraint: maxSkew:integer topologyKey whenUnsatisfiable
  labelSelector:meta.LabelSelector minDomains:integer nodeAffinityPolicy nodeTaintsPolicy
  matchLabelKeys:[]string
core.PodOS: name
core.PodSchedulingGate: name
core.PodResourceClaim: name resourceClaimName resourceClaimTemplateName
core.Volume: name hostPath:core.HostPathVolumeSource emptyDir:core.EmptyDirVolumeSource
  secret:core.SecretVolumeSource persistentVolumeClaim:core.PVCVolumeSource
  configMap:core.ConfigMapVolumeSource projected:core.ProjectedVolumeSource
  downwardAPI:core.DownwardAPIVolumeSource nfs:core.NFSVolumeSource csi:core.CSIVolumeSource
  ephemeral:core.EphemeralVolumeSource image:core.ImageVolumeSource
core.HostPathVolumeSource: path type
core.EmptyDirVolumeSource: medium sizeLimit
core.SecretVolumeSource: secretName items:[]core.KeyToPath defaultMode:integer optional:boolean
core.KeyToPath: key path mode:integer
core.PVCVolumeSource: claimName readOnly:boolean
core.ConfigMapVolumeSource: name items:[]core.KeyToPath defaultMode:integer optional:boolean
core.ProjectedVolumeSource: sources:[]core.VolumeProjection defaultMode:integer
core.VolumeProjection: secret:core.KeyProjection configMap:core.KeyProjection
  downwardAPI:core.DownwardAPIProjection serviceAccountToken:core.TokenProjection
  clusterTrustBundle:object
core.KeyProjection: name items:[]core.KeyToPath optional:boolean
core.DownwardAPIProjection: items:[]core.DownwardAPIVolumeFile
core.DownwardAPIVolumeFile: path fieldRef:core.ObjectFieldSelector
  resourceFieldRef:core.ResourceFieldSelector mode:integer
core.DownwardAPIVolumeSource: items:[]core.DownwardAPIVolumeFile defaultMode:integer
core.TokenProjection: audience expirationSeconds:integer path
core.NFSVolumeSource: server path readOnly:boolean
core.CSIVolumeSource: driver readOnly:boolean fsType volumeAttributes:{}string
  nodePublishSecretRef:core.LocalObjectReference
core.EphemeralVolumeSource: volumeClaimTemplate:core.PersistentVolumeClaimTemplate
core.PersistentVolumeClaimTemplate: metadata:meta.ObjectMeta spec:core.PersistentVolumeClaimSpec
core.ImageVolumeSource: reference pullPolicy
core.PodStatus: phase conditions:[]core.Condition message reason nominatedNodeName hostIP
  hostIPs:[]core.HostIP podIP podIPs:[]core.HostIP startTime initContainerStatuses:[]object
  containerStatuses:[]object ephemeralContainerStatuses:[]object qosClass
  resourceClaimStatuses:[]object
core.HostIP: ip
core.Service: apiVersion kind metadata:meta.ObjectMeta spec:core.ServiceSpec
  status:core.ServiceStatus
core.ServiceSpec: ports:[]core.ServicePort selector:{}string clusterIP clusterIPs:[]string
  type externalIPs:[]string sessionAffinity loadBalancerIP loadBalancerSourceRanges:[]string
  externalName externalTrafficPolicy healthCheckNodePort:integer
  publishNotReadyAddresses:boolean sessionAffinityConfig:core.SessionAffinityConfig
  ipFamilies:[]string ipFamilyPolicy allocateLoadBalancerNodePorts:boolean
  loadBalancerClass internalTrafficPolicy trafficDistribution
core.ServicePort: name protocol appProtocol port:integer targetPort nodePort:integer
core.SessionAffinityConfig: clientIP:core.ClientIPConfig
core.ClientIPConfig: timeoutSeconds:integer
core.ServiceStatus: loadBalancer:core.LoadBalancerStatus conditions:[]meta.Condition
core.LoadBalancerStatus: ingress:[]core.LoadBalancerIngress
core.LoadBalancerIngress: ip hostname ipMode ports:[]object
core.ConfigMap: apiVersion kind metadata:meta.ObjectMeta data:{}string binaryData:{}string
  immutable:boolean
core.Secret: apiVersion kind metadata:meta.ObjectMeta data:{}string stringData:{}string type
  immutable:boolean
core.ServiceAccount: apiVersion kind metadata:meta.ObjectMeta secrets:[]core.ObjectReference
  imagePullSecrets:[]core.LocalObjectReference automountServiceAccountToken:boolean
core.ObjectReference: kind namespace name uid apiVersion resourceVersion fieldPath
core.PersistentVolumeClaim: apiVersion kind metadata:meta.ObjectMeta
  spec:core.PersistentVolumeClaimSpec status:core.PersistentVolumeClaimStatus
core.PersistentVolumeClaimSpec: accessModes:[]string selector:meta.LabelSelector
  resources:core.VolumeResourceRequirements volumeName storageClassName volumeMode
  dataSource:core.TypedObjectReference dataSourceRef:core.TypedObjectReference
  volumeAttributesClassName
core.VolumeResourceRequirements: limits:{}string requests:{}string
core.TypedObjectReference: apiGroup kind name namespace
core.PersistentVolumeClaimStatus: phase accessModes:[]string capacity:{}string
  conditions:[]core.Condition allocatedResources:{}string
core.Event: apiVersion kind metadata:meta.ObjectMeta involvedObject:core.ObjectReference
  reason message source:core.EventSource firstTimestamp lastTimestamp count:integer type
  eventTime action related:core.ObjectReference reportingComponent reportingInstance
  series:object
core.EventSource: component host

apps.Deployment: apiVersion kind metadata:meta.ObjectMeta spec:apps.DeploymentSpec
  status:apps.WorkloadStatus
apps.DeploymentSpec: replicas:integer selector:meta.LabelSelector
  template:core.PodTemplateSpec strategy:apps.DeploymentStrategy minReadySeconds:integer
  revisionHistoryLimit:integer paused:boolean progressDeadlineSeconds:integer
apps.DeploymentStrategy: type rollingUpdate:apps.RollingUpdate
apps.RollingUpdate: maxUnavailable maxSurge partition:integer
apps.WorkloadStatus: observedGeneration:integer replicas:integer updatedReplicas:integer
  readyReplicas:integer availableReplicas:integer unavailableReplicas:integer
  currentReplicas:integer fullyLabeledReplicas:integer currentRevision updateRevision
  collisionCount:integer conditions:[]core.Condition currentNumberScheduled:integer
  numberMisscheduled:integer desiredNumberScheduled:integer numberReady:integer
  updatedNumberScheduled:integer numberAvailable:integer numberUnavailable:integer
apps.ReplicaSet: apiVersion kind metadata:meta.ObjectMeta spec:apps.ReplicaSetSpec
  status:apps.WorkloadStatus
apps.ReplicaSetSpec: replicas:integer minReadySeconds:integer selector:meta.LabelSelector
  template:core.PodTemplateSpec
apps.StatefulSet: apiVersion kind metadata:meta.ObjectMeta spec:apps.StatefulSetSpec
  status:apps.WorkloadStatus
apps.StatefulSetSpec: replicas:integer selector:meta.LabelSelector
  template:core.PodTemplateSpec volumeClaimTemplates:[]core.PersistentVolumeClaim
  serviceName podManagementPolicy updateStrategy:apps.UpdateStrategy
  revisionHistoryLimit:integer minReadySeconds:integer
  persistentVolumeClaimRetentionPolicy:apps.RetentionPolicy ordinals:apps.Ordinals
apps.UpdateStrategy: type rollingUpdate:apps.RollingUpdate
apps.RetentionPolicy: whenDeleted whenScaled
apps.Ordinals: start:integer
apps.DaemonSet: apiVersion kind metadata:meta.ObjectMeta spec:apps.DaemonSetSpec
  status:apps.WorkloadStatus
apps.DaemonSetSpec: selector:meta.LabelSelector template:core.PodTemplateSpec
  updateStrategy:apps.UpdateStrategy minReadySeconds:integer revisionHistoryLimit:integer
apps.ControllerRevision: apiVersion kind metadata:meta.ObjectMeta data:object revision:integer

batch.Job: apiVersion kind metadata:meta.ObjectMeta spec:batch.JobSpec status:batch.JobStatus
batch.JobSpec: parallelism:integer completions:integer activeDeadlineSeconds:integer
  podFailurePolicy:object successPolicy:object backoffLimit:integer
  backoffLimitPerIndex:integer maxFailedIndexes:integer selector:meta.LabelSelector
  manualSelector:boolean template:core.PodTemplateSpec ttlSecondsAfterFinished:integer
  completionMode suspend:boolean podReplacementPolicy managedBy
batch.JobStatus: conditions:[]core.Condition startTime completionTime active:integer
  succeeded:integer failed:integer terminating:integer completedIndexes failedIndexes
  uncountedTerminatedPods:object ready:integer
batch.CronJob: apiVersion kind metadata:meta.ObjectMeta spec:batch.CronJobSpec
  status:batch.CronJobStatus
batch.CronJobSpec: schedule timeZone startingDeadlineSeconds:integer concurrencyPolicy
  suspend:boolean jobTemplate:batch.JobTemplateSpec successfulJobsHistoryLimit:integer
  failedJobsHistoryLimit:integer
batch.JobTemplateSpec: metadata:meta.ObjectMeta spec:batch.JobSpec
batch.CronJobStatus: active:[]core.ObjectReference lastScheduleTime lastSuccessfulTime

networking.Ingress: apiVersion kind metadata:meta.ObjectMeta spec:networking.IngressSpec
  status:object
networking.IngressSpec: ingressClassName defaultBackend:networking.IngressBackend
  tls:[]networking.IngressTLS rules:[]networking.IngressRule
networking.IngressBackend: service:networking.IngressServiceBackend
  resource:core.TypedObjectReference
networking.IngressServiceBackend: name port:networking.ServiceBackendPort
networking.ServiceBackendPort: name number:integer
networking.IngressTLS: hosts:[]string secretName
networking.IngressRule: host http:networking.HTTPIngressRuleValue
networking.HTTPIngressRuleValue: paths:[]networking.HTTPIngressPath
networking.HTTPIngressPath: path pathType backend:networking.IngressBackend
networking.NetworkPolicy: apiVersion kind metadata:meta.ObjectMeta
  spec:networking.NetworkPolicySpec
networking.NetworkPolicySpec: podSelector:meta.LabelSelector
  ingress:[]networking.NetworkPolicyRule egress:[]networking.NetworkPolicyRule
  policyTypes:[]string
networking.NetworkPolicyRule: ports:[]networking.NetworkPolicyPort
  from:[]networking.NetworkPolicyPeer to:[]networking.NetworkPolicyPeer
networking.NetworkPolicyPort: protocol port endPort:integer
networking.NetworkPolicyPeer: podSelector:meta.LabelSelector
  namespaceSelector:meta.LabelSelector ipBlock:networking.IPBlock
networking.IPBlock: cidr except:[]string

autoscaling.HorizontalPodAutoscaler: apiVersion kind metadata:meta.ObjectMeta
  spec:autoscaling.HorizontalPodAutoscalerSpec status:autoscaling.HorizontalPodAutoscalerStatus
autoscaling.HorizontalPodAutoscalerSpec: scaleTargetRef:autoscaling.CrossVersionObjectReference
  minReplicas:integer maxReplicas:integer metrics:[]object behavior:object
autoscaling.CrossVersionObjectReference: kind name apiVersion
autoscaling.HorizontalPodAutoscalerStatus: observedGeneration:integer lastScaleTime
  currentReplicas:integer desiredReplicas:integer currentMetrics:[]object
  conditions:[]core.Condition

rbac.Role: apiVersion kind metadata:meta.ObjectMeta rules:[]rbac.PolicyRule
rbac.ClusterRole: apiVersion kind metadata:meta.ObjectMeta rules:[]rbac.PolicyRule
  aggregationRule:rbac.AggregationRule
rbac.PolicyRule: verbs:[]string apiGroups:[]string resources:[]string resourceNames:[]string
  nonResourceURLs:[]string
rbac.AggregationRule: clusterRoleSelectors:[]meta.LabelSelector
rbac.RoleBinding: apiVersion kind metadata:meta.ObjectMeta subjects:[]rbac.Subject
  roleRef:rbac.RoleRef
rbac.ClusterRoleBinding: apiVersion kind metadata:meta.ObjectMeta subjects:[]rbac.Subject
  roleRef:rbac.RoleRef
rbac.Subject: kind apiGroup name namespace
rbac.RoleRef: apiGroup kind name

apiextensions.CustomResourceDefinition: apiVersion kind metadata:meta.ObjectMeta
  spec:apiextensions.CustomResourceDefinitionSpec status:object
apiextensions.CustomResourceDefinitionSpec: group names:apiextensions.Names scope
  versions:[]apiextensions.Version conversion:object preserveUnknownFields:boolean
apiextensions.Names: plural singular shortNames:[]string kind listKind categories:[]string
apiextensions.Version: name served:boolean storage:boolean deprecated:boolean
  deprecationWarning schema:object subresources:object additionalPrinterColumns:[]object
  selectableFields:[]object
"""


def _parse(outline: str) -> dict[str, dict[str, str]]:
    types: dict[str, dict[str, str]] = {}
    fields: dict[str, str] = {}
    for line in outline.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):  # "Type: fields...", continued on indented lines
            name, _, line = line.partition(":")
            fields = types[name] = {}
        for word in line.split():
            field, _, type_ = word.partition(":")
            fields[field] = type_ or "string"
    return types


#: Type name -> {field name: field type}, in the outline's notation.
TYPES: Final = _parse(_OUTLINE)
