"""Where each resource lives on the API server: group, version, plural, scope."""

from __future__ import annotations

from dataclasses import dataclass

from fleet.api.protocol import GROUP


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool = True
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


NAMESPACES = Resource("", "v1", "namespaces", namespaced=False, kind="Namespace")
NODES = Resource("", "v1", "nodes", namespaced=False, kind="Node")
PODS = Resource("", "v1", "pods", kind="Pod")
SERVICES = Resource("", "v1", "services", kind="Service")
CONFIGMAPS = Resource("", "v1", "configmaps", kind="ConfigMap")
SECRETS = Resource("", "v1", "secrets", kind="Secret")
PVCS = Resource("", "v1", "persistentvolumeclaims", kind="PersistentVolumeClaim")
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", kind="ServiceAccount")
RESOURCEQUOTAS = Resource("", "v1", "resourcequotas", kind="ResourceQuota")
EVENTS = Resource("", "v1", "events", kind="Event")
DEPLOYMENTS = Resource("apps", "v1", "deployments", kind="Deployment")
DAEMONSETS = Resource("apps", "v1", "daemonsets", kind="DaemonSet")
LEASES = Resource("coordination.k8s.io", "v1", "leases", kind="Lease")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", kind="Role")
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", kind="RoleBinding")
CLUSTERROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False,
                        kind="ClusterRole")
CLUSTERROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings",
                               namespaced=False, kind="ClusterRoleBinding")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False,
                kind="CustomResourceDefinition")
PRIORITYCLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False,
                           kind="PriorityClass")
VALIDATINGWEBHOOKCONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", namespaced=False,
    kind="ValidatingWebhookConfiguration")
MUTATINGWEBHOOKCONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", namespaced=False,
    kind="MutatingWebhookConfiguration")
VALIDATINGADMISSIONPOLICIES = Resource(
    "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", namespaced=False,
    kind="ValidatingAdmissionPolicy")
VALIDATINGADMISSIONPOLICYBINDINGS = Resource(
    "admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", namespaced=False,
    kind="ValidatingAdmissionPolicyBinding")
PODDISRUPTIONBUDGETS = Resource("policy", "v1", "poddisruptionbudgets",
                                kind="PodDisruptionBudget")
ENDPOINTSLICES = Resource("discovery.k8s.io", "v1", "endpointslices", kind="EndpointSlice")
SELFSUBJECTRULESREVIEWS = Resource("authorization.k8s.io", "v1", "selfsubjectrulesreviews",
                                   namespaced=False, kind="SelfSubjectRulesReview")
SELFSUBJECTACCESSREVIEWS = Resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews",
                                    namespaced=False, kind="SelfSubjectAccessReview")

MEMBERCLUSTERS = Resource(GROUP, "v1alpha1", "memberclusters", namespaced=False,
                          kind="MemberCluster")
WORKS = Resource(GROUP, "v1alpha1", "works", kind="Work")
PROPAGATIONPOLICIES = Resource("policy.one.alibabacloud.com", "v1alpha1", "propagationpolicies",
                               kind="PropagationPolicy")
CLUSTERPROPAGATIONPOLICIES = Resource("policy.one.alibabacloud.com", "v1alpha1",
                                      "clusterpropagationpolicies", namespaced=False,
                                      kind="ClusterPropagationPolicy")
ELASTICQUOTATREES = Resource("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees",
                             kind="ElasticQuotaTree")
QUEUES = Resource("scheduling.x-k8s.io", "v1alpha1", "queues", kind="Queue")

PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs", kind="PyTorchJob")
TFJOBS = Resource("kubeflow.org", "v1", "tfjobs", kind="TFJob")
KUBEFLOW_MPIJOBS = Resource("kubeflow.org", "v1", "mpijobs", kind="MPIJob")
JAXJOBS = Resource("kubeflow.org", "v1", "jaxjobs", kind="JAXJob")
PADDLEJOBS = Resource("kubeflow.org", "v1", "paddlejobs", kind="PaddleJob")
XGBOOSTJOBS = Resource("kubeflow.org", "v1", "xgboostjobs", kind="XGBoostJob")
T9K_MPIJOBS = Resource("batch.tensorstack.dev", "v1beta1", "mpijobs", kind="MPIJob")
TENSORFLOWTRAININGJOBS = Resource("batch.tensorstack.dev", "v1beta1", "tensorflowtrainingjobs",
                                  kind="TensorFlowTrainingJob")

JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", kind="JobSet")
TRAINJOBS = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", kind="TrainJob")
TRAININGRUNTIMES = Resource("trainer.kubeflow.org", "v1alpha1", "trainingruntimes",
                            kind="TrainingRuntime")
CLUSTERTRAININGRUNTIMES = Resource("trainer.kubeflow.org", "v1alpha1",
                                   "clustertrainingruntimes", namespaced=False,
                                   kind="ClusterTrainingRuntime")

JOB_KINDS = (PYTORCHJOBS, TFJOBS, KUBEFLOW_MPIJOBS, JAXJOBS, PADDLEJOBS, XGBOOSTJOBS,
             T9K_MPIJOBS, TENSORFLOWTRAININGJOBS, JOBSETS, TRAINJOBS)

_BY_KIND = {(r.api_version, r.kind): r for r in (
    NAMESPACES, NODES, PODS, SERVICES, CONFIGMAPS, SECRETS, PVCS, SERVICEACCOUNTS, EVENTS, LEASES,
    DEPLOYMENTS, DAEMONSETS, VALIDATINGWEBHOOKCONFIGURATIONS, MUTATINGWEBHOOKCONFIGURATIONS,
    VALIDATINGADMISSIONPOLICIES,
    VALIDATINGADMISSIONPOLICYBINDINGS, PODDISRUPTIONBUDGETS, ENDPOINTSLICES,
    ROLES, ROLEBINDINGS, CLUSTERROLES, CLUSTERROLEBINDINGS, CRDS, PRIORITYCLASSES, MEMBERCLUSTERS,
    WORKS, PROPAGATIONPOLICIES, CLUSTERPROPAGATIONPOLICIES, ELASTICQUOTATREES, QUEUES, *JOB_KINDS,
    TRAININGRUNTIMES, CLUSTERTRAININGRUNTIMES,
)}


def for_kind(api_version: str, kind: str) -> Resource:
    try:
        return _BY_KIND[(api_version, kind)]
    except KeyError:
        raise KeyError(f"fleet does not know {kind} in {api_version}") from None
