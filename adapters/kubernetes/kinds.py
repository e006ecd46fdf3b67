"""Every kind the controller reads or writes, as `rest.Resource` values.

One list, so the informers, the RBAC in deploy/ and the tests speak of the same kinds.
`OPTIONAL` are the kinds a plain cluster may not serve: the ai-models catalog, Deckhouse's
ModuleConfig and DRA v1. The controller runs without them and picks them up later.
"""

from __future__ import annotations

from adapters.kubernetes.rest import Resource

__all__ = [
    "CLUSTER_MODELS",
    "DEPLOYMENTS",
    "DEVICE_CLASSES",
    "INFERENCE_SERVICES",
    "INFERENCE_SERVICE_CLASSES",
    "INGRESSES",
    "LAUNCH_RECIPES",
    "MODELS",
    "MODULE_CONFIGS",
    "OPTIONAL",
    "PODS",
    "PRIORITY_CLASSES",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_SLICES",
    "SECRETS",
    "SERVICES",
    "autoscalers",
]

_AI = "ai.deckhouse.io"
INFERENCE_SERVICES = Resource(_AI, "v1alpha1", "inferenceservices", "InferenceService")
INFERENCE_SERVICE_CLASSES = Resource(
    _AI, "v1alpha1", "inferenceserviceclasses", "InferenceServiceClass", namespaced=False
)
LAUNCH_RECIPES = Resource(_AI, "v1alpha1", "launchrecipes", "LaunchRecipe", namespaced=False)
MODELS = Resource(_AI, "v1alpha1", "models", "Model")
CLUSTER_MODELS = Resource(_AI, "v1alpha1", "clustermodels", "ClusterModel", namespaced=False)
MODULE_CONFIGS = Resource(
    "deckhouse.io", "v1alpha1", "moduleconfigs", "ModuleConfig", namespaced=False
)

_DRA = "resource.k8s.io"
DEVICE_CLASSES = Resource(_DRA, "v1", "deviceclasses", "DeviceClass", namespaced=False)
RESOURCE_SLICES = Resource(_DRA, "v1", "resourceslices", "ResourceSlice", namespaced=False)
RESOURCE_CLAIMS = Resource(_DRA, "v1", "resourceclaims", "ResourceClaim")
RESOURCE_CLAIM_TEMPLATES = Resource(_DRA, "v1", "resourceclaimtemplates", "ResourceClaimTemplate")

PRIORITY_CLASSES = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)
SECRETS = Resource("", "v1", "secrets", "Secret")
PODS = Resource("", "v1", "pods", "Pod")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
SERVICES = Resource("", "v1", "services", "Service")
INGRESSES = Resource("networking.k8s.io", "v1", "ingresses", "Ingress")


def autoscalers(api_version: str = "autoscaling/v2") -> Resource:
    """HorizontalPodAutoscalers in the API version the server serves (v2beta2 before 1.23)."""
    group, _, version = api_version.partition("/")
    return Resource(group, version, "horizontalpodautoscalers", "HorizontalPodAutoscaler")


OPTIONAL = frozenset(
    {
        MODELS,
        CLUSTER_MODELS,
        MODULE_CONFIGS,
        DEVICE_CLASSES,
        RESOURCE_SLICES,
        RESOURCE_CLAIMS,
        RESOURCE_CLAIM_TEMPLATES,
    }
)
