"""Typed reads of a Kubernetes cluster's API. Pure Python: no Django in here.

`KubeClient` lives in `.client`, which imports the official `kubernetes` package (slow to
import); what is here (kubeconfig rules, errors, types) does not, so that the models can
validate a kubeconfig without it. Import the client from
`capvco_web.integrations.kube.client` where calls are made.
"""

from .errors import (
    BadRequest,
    Conflict,
    Expired,
    Forbidden,
    KubeError,
    NotFound,
    ServerError,
    ServerNotAllowed,
    Timeout,
    TooManyRequests,
    Unauthorized,
    UnexpectedResponse,
    Unreachable,
)
from .kubeconfig import Kubeconfig, KubeconfigInvalid, kubeconfig_check, kubeconfig_load
from .servers import AllowedServers
from .types import (
    GPU_COUNT_LABEL,
    GPU_RESOURCE,
    GPU_TYPE_LABEL,
    LABEL_KEY_MAX,
    LABEL_KEY_PATTERN,
    SRIOV_NETWORK_ANNOTATION,
    Job,
    Listing,
    Node,
    Pod,
    PodRun,
    WatchEvent,
    gpu_label_value,
    label_key_problem,
    parse_node,
    parse_pod,
    pod_gpu_requests,
)

__all__ = [
    "GPU_COUNT_LABEL",
    "GPU_RESOURCE",
    "GPU_TYPE_LABEL",
    "LABEL_KEY_MAX",
    "LABEL_KEY_PATTERN",
    "SRIOV_NETWORK_ANNOTATION",
    "AllowedServers",
    "BadRequest",
    "Conflict",
    "Expired",
    "Forbidden",
    "Job",
    "KubeError",
    "Kubeconfig",
    "KubeconfigInvalid",
    "Listing",
    "Node",
    "NotFound",
    "Pod",
    "PodRun",
    "ServerError",
    "ServerNotAllowed",
    "Timeout",
    "TooManyRequests",
    "Unauthorized",
    "UnexpectedResponse",
    "Unreachable",
    "WatchEvent",
    "gpu_label_value",
    "kubeconfig_check",
    "kubeconfig_load",
    "label_key_problem",
    "parse_node",
    "parse_pod",
    "pod_gpu_requests",
]
