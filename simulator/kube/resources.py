"""The kinds a simulated cluster serves: the few built-in ones the project uses (nodes,
pods, namespaces, configmaps, secrets, serviceaccounts, daemonsets, deployments, CRDs,
RBAC's roles and bindings), and any custom resource registered by a
CustomResourceDefinition (or the control API).

Storage is per group and plural, whatever the version: a custom resource served at two
versions is one set of objects (the real server converts between versions; the simulator
only rewrites `apiVersion`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The verbs served, and only those: deletecollection is not simulated.
CORE_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]

# What a create does to the status of a kind with a status subresource, as the real
# registry strategies do: a pod starts Pending whatever it was sent with, a namespace
# Active, a custom resource without status; a node keeps what the kubelet registered.
STATUS_ON_CREATE_KEEP = "keep"
STATUS_ON_CREATE_DROP = "drop"


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = True
    builtin: bool = True  # built-in kinds take strategic merge patches; custom ones do not
    status_on_create: Any = STATUS_ON_CREATE_KEEP
    field_selectors: tuple[str, ...] = ()
    short_names: tuple[str, ...] = field(default=())
    categories: tuple[str, ...] = ()  # "all": listed by `kubectl get all`
    scale: bool = False  # a /scale subresource (autoscaling/v1 Scale of spec.replicas)
    # Subresources that are only created (a pod's binding and eviction): name, group,
    # version, kind, as discovery lists them.
    actions: tuple[tuple[str, str, str, str], ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def qualified(self) -> str:
        """How the server names the kind in messages: `pods`, `machines.cluster.x-k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def selectable_fields(self) -> tuple[str, ...]:
        fields = ("metadata.name", "metadata.namespace") if self.namespaced else ("metadata.name",)
        return fields + self.field_selectors

    def discovery(self) -> list[dict[str, Any]]:
        """Its entries in an APIResourceList."""
        entries = [
            {
                "name": self.plural,
                "singularName": self.kind.lower(),
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": list(CORE_VERBS),
                **({"shortNames": list(self.short_names)} if self.short_names else {}),
                **({"categories": list(self.categories)} if self.categories else {}),
            }
        ]
        if self.scale:
            entries.append(
                {
                    "name": f"{self.plural}/scale",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }
            )
        for action, group, version, kind in self.actions:
            entries.append(
                {
                    "name": f"{self.plural}/{action}",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    **({"group": group, "version": version} if group else {}),
                    "kind": kind,
                    "verbs": ["create"],
                }
            )
        if self.status_subresource:
            entries.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        return entries


NODES = ResourceType(
    "", "v1", "nodes", "Node", namespaced=False, field_selectors=("spec.unschedulable",),
    short_names=("no",),
)  # fmt: skip
PODS = ResourceType(
    "", "v1", "pods", "Pod", namespaced=True,
    status_on_create={"phase": "Pending"},
    field_selectors=(
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
    ),
    short_names=("po",), categories=("all",),
    actions=(("binding", "", "", "Binding"), ("eviction", "policy", "v1", "Eviction")),
)  # fmt: skip
NAMESPACES = ResourceType(
    "", "v1", "namespaces", "Namespace", namespaced=False,
    status_on_create={"phase": "Active"}, field_selectors=("status.phase",),
    short_names=("ns",),
)  # fmt: skip
CONFIGMAPS = ResourceType(
    "", "v1", "configmaps", "ConfigMap", namespaced=True, status_subresource=False,
    short_names=("cm",),
)  # fmt: skip
SECRETS = ResourceType("", "v1", "secrets", "Secret", namespaced=True, status_subresource=False)
# A DaemonSet's status is the controller's: a create drops what it was sent with.
DAEMONSETS = ResourceType(
    "apps", "v1", "daemonsets", "DaemonSet", namespaced=True,
    status_on_create=STATUS_ON_CREATE_DROP, short_names=("ds",), categories=("all",),
)  # fmt: skip
DEPLOYMENTS = ResourceType(
    "apps", "v1", "deployments", "Deployment", namespaced=True,
    status_on_create=STATUS_ON_CREATE_DROP, short_names=("deploy",), categories=("all",),
    scale=True,
)  # fmt: skip
CRDS = ResourceType(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
    namespaced=False, short_names=("crd",),
)  # fmt: skip
# The disruption controller's part is in simulator/kube/pods.py: its status follows the pods.
PDBS = ResourceType(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True,
    status_on_create=STATUS_ON_CREATE_DROP, short_names=("pdb",),
)  # fmt: skip

# Their controller and their pods' kubelet are in simulator/kube/jobs.py (``--schedule``).
JOBS = ResourceType(
    "batch", "v1", "jobs", "Job", namespaced=True, status_on_create=STATUS_ON_CREATE_DROP,
    categories=("all",),
)  # fmt: skip

SERVICE_ACCOUNTS = ResourceType(
    "", "v1", "serviceaccounts", "ServiceAccount", namespaced=True, status_subresource=False,
    short_names=("sa",),
)  # fmt: skip
# Only stored: what a Service routes to is read through a pod proxy (simulator/kube/dcgm.py).
SERVICES = ResourceType(
    "", "v1", "services", "Service", namespaced=True, short_names=("svc",), categories=("all",),
)  # fmt: skip
_RBAC = "rbac.authorization.k8s.io"
RBAC = tuple(
    ResourceType(_RBAC, "v1", plural, kind, namespaced=namespaced, status_subresource=False)
    for plural, kind, namespaced in (
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
    )
)  # fmt: skip

BUILTIN: tuple[ResourceType, ...] = (
    NODES, PODS, NAMESPACES, CONFIGMAPS, SECRETS, SERVICE_ACCOUNTS, SERVICES, DAEMONSETS,
    DEPLOYMENTS, CRDS, *RBAC, PDBS, JOBS,
)  # fmt: skip


def custom_type(
    *, group: str, version: str, plural: str, kind: str, namespaced: bool, status: bool = True
) -> ResourceType:
    return ResourceType(
        group,
        version,
        plural,
        kind,
        namespaced=namespaced,
        status_subresource=status,
        builtin=False,
        status_on_create=STATUS_ON_CREATE_DROP if status else STATUS_ON_CREATE_KEEP,
    )


def types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The kinds a CustomResourceDefinition serves (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    if not (group and plural and kind):
        raise ValueError("spec.group, spec.names.plural and spec.names.kind are required")
    found = []
    for version in spec.get("versions") or []:
        if not version.get("served", True) or not version.get("name"):
            continue
        found.append(
            custom_type(
                group=group,
                version=version["name"],
                plural=plural,
                kind=kind,
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                status="status" in (version.get("subresources") or {}),
            )
        )
    if not found:
        raise ValueError("spec.versions names no served version")
    return found
