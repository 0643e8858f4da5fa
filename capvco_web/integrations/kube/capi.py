"""The Cluster API objects the CAPI import reads, as frozen dataclasses, from the JSON of a
management cluster's listings. Pure Python: no Django in here.

The kinds and the fields read are in `docs/guides/capi-crds.yaml`: `Cluster` and
`MachineDeployment` of `cluster.x-k8s.io/v1beta1`, and the VCO provider's `VCOCluster`
(`spec.location`, `spec.cloudspaceId`, `spec.imageId`) and `VCOMachineTemplate`
(`spec.template.spec`: `vcpus`, `memoryMiB`, `diskGiB`, `gpu`, `sriov`), of
`infrastructure.cluster.x-k8s.io/v1beta1`.

An object we cannot read raises `CapiObjectInvalid`, naming the object and the field; its
identity (`object_key`) is kept so that an unreadable object is never taken for a deleted
one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CAPI_GROUP, CAPI_VERSION = "cluster.x-k8s.io", "v1beta1"
INFRA_GROUP, INFRA_VERSION = "infrastructure.cluster.x-k8s.io", "v1beta1"
VCO_CLUSTER_KIND = "VCOCluster"
VCO_TEMPLATE_KIND = "VCOMachineTemplate"
# (group, version, plural) of each kind listed.
CLUSTERS = (CAPI_GROUP, CAPI_VERSION, "clusters")
MACHINE_DEPLOYMENTS = (CAPI_GROUP, CAPI_VERSION, "machinedeployments")
VCO_CLUSTERS = (INFRA_GROUP, INFRA_VERSION, "vcoclusters")
VCO_MACHINE_TEMPLATES = (INFRA_GROUP, INFRA_VERSION, "vcomachinetemplates")

Json = Mapping[str, Any]


class CapiObjectInvalid(ValueError):
    """An object that cannot be read as the import needs it; the message says which and why."""


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class CapiCluster:
    namespace: str
    name: str
    labels: Mapping[str, str]
    infrastructure: ObjectRef | None
    deleting: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class MachineDeployment:
    namespace: str
    name: str
    cluster_name: str
    replicas: int
    template: ObjectRef | None
    deleting: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class VcoCluster:
    namespace: str
    name: str
    location: str
    cloudspace_id: str
    image_id: int


@dataclass(frozen=True)
class GpuSpec:
    type: str = ""
    profile_id: str = ""
    count: int = 0
    driver_version: str = ""


@dataclass(frozen=True)
class VcoMachineTemplate:
    namespace: str
    name: str
    vcpus: int
    memory_mib: int
    disk_gib: int
    gpu: GpuSpec
    sriov_secret_ref: str
    """`<namespace>/<name>` of `spec.sriov.credentialSecretRef`; empty when none."""


# Defaults of a machine template's fields, as a pool of the control plane has them.
DEFAULT_VCPUS, DEFAULT_MEMORY_MIB, DEFAULT_DISK_GIB = 4, 8192, 50


def object_key(obj: Json) -> str | None:
    """`<namespace>/<name>` of any listed object; None without them."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    namespace, name = meta.get("namespace"), meta.get("name")
    if isinstance(namespace, str) and isinstance(name, str) and namespace and name:
        return f"{namespace}/{name}"
    return None


def _meta(obj: Json, kind: str) -> tuple[str, str, Mapping[str, Any]]:
    key = object_key(obj)
    if key is None:
        raise CapiObjectInvalid(f"a {kind} without metadata.namespace and metadata.name")
    meta = obj["metadata"]
    return meta["namespace"], meta["name"], meta


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _text(where: str, value: Any, field: str, *, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise CapiObjectInvalid(f"{where}: {field} is required")
        return ""
    if not isinstance(value, str):
        raise CapiObjectInvalid(f"{where}: {field} must be a string, not {value!r:.50}")
    return value.strip()


def _integer(where: str, value: Any, field: str, *, default: int | None = None) -> int:
    if value is None:
        if default is None:
            raise CapiObjectInvalid(f"{where}: {field} is required")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise CapiObjectInvalid(f"{where}: {field} must be an integer, not {value!r:.50}")
    return value


def _ref(value: Any, namespace: str) -> ObjectRef | None:
    if not isinstance(value, Mapping) or not value.get("name"):
        return None
    return ObjectRef(
        kind=str(value.get("kind") or ""),
        namespace=str(value.get("namespace") or namespace),
        name=str(value["name"]),
    )


def parse_capi_cluster(obj: Json) -> CapiCluster:
    namespace, name, meta = _meta(obj, "Cluster")
    labels = meta.get("labels")
    if not isinstance(labels, Mapping):
        labels = {}
    return CapiCluster(
        namespace=namespace,
        name=name,
        labels={str(k): str(v) for k, v in labels.items()},
        infrastructure=_ref(_get(obj, "spec", "infrastructureRef"), namespace),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def parse_machine_deployment(obj: Json) -> MachineDeployment:
    namespace, name, meta = _meta(obj, "MachineDeployment")
    where = f"MachineDeployment {namespace}/{name}"
    spec = _get(obj, "spec") or {}
    # CAPI defaults an unset replicas to 1.
    replicas = _integer(where, _get(spec, "replicas"), "spec.replicas", default=1)
    if replicas < 0:
        raise CapiObjectInvalid(f"{where}: spec.replicas must not be negative")
    return MachineDeployment(
        namespace=namespace,
        name=name,
        cluster_name=_text(where, _get(spec, "clusterName"), "spec.clusterName", required=True),
        replicas=replicas,
        template=_ref(_get(spec, "template", "spec", "infrastructureRef"), namespace),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def parse_vco_cluster(obj: Json) -> VcoCluster:
    namespace, name, _ = _meta(obj, VCO_CLUSTER_KIND)
    where = f"{VCO_CLUSTER_KIND} {namespace}/{name}"
    spec = _get(obj, "spec")
    return VcoCluster(
        namespace=namespace,
        name=name,
        location=_text(where, _get(spec, "location"), "spec.location", required=True),
        cloudspace_id=_text(where, _get(spec, "cloudspaceId"), "spec.cloudspaceId", required=True),
        image_id=_integer(where, _get(spec, "imageId"), "spec.imageId"),
    )


def parse_vco_machine_template(obj: Json) -> VcoMachineTemplate:
    namespace, name, _ = _meta(obj, VCO_TEMPLATE_KIND)
    where = f"{VCO_TEMPLATE_KIND} {namespace}/{name}"
    machine = _get(obj, "spec", "template", "spec")
    if not isinstance(machine, Mapping):
        raise CapiObjectInvalid(f"{where}: spec.template.spec is required")
    gpu = machine.get("gpu") or {}
    if not isinstance(gpu, Mapping):
        raise CapiObjectInvalid(f"{where}: spec.template.spec.gpu must be an object")
    field = "spec.template.spec.gpu"
    secret = _get(machine, "sriov", "credentialSecretRef")
    secret_ref = ""
    if isinstance(secret, Mapping) and secret.get("name"):
        secret_ref = f"{secret.get('namespace') or namespace}/{secret['name']}"
    return VcoMachineTemplate(
        namespace=namespace,
        name=name,
        vcpus=_integer(where, machine.get("vcpus"), "vcpus", default=DEFAULT_VCPUS),
        memory_mib=_integer(
            where, machine.get("memoryMiB"), "memoryMiB", default=DEFAULT_MEMORY_MIB
        ),
        disk_gib=_integer(where, machine.get("diskGiB"), "diskGiB", default=DEFAULT_DISK_GIB),
        gpu=GpuSpec(
            type=_text(where, gpu.get("type"), f"{field}.type"),
            profile_id=_text(where, gpu.get("profileId"), f"{field}.profileId"),
            count=_integer(where, gpu.get("count"), f"{field}.count", default=0),
            driver_version=_text(where, gpu.get("driverVersion"), f"{field}.driverVersion"),
        ),
        sriov_secret_ref=secret_ref,
    )
