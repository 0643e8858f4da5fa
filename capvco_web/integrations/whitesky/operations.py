"""Every whitesky call the client makes, declared once.

The transport's request function (`Transport._call`) refuses to send a parameter that is
not declared here, and `tests/integrations/whitesky/test_contract.py` checks this table
against the API description (`whitesky-api.json`): same operationId, method, path template,
parameter names and places.
So this table is what keeps the client honest about what it sends.

`repeatable` marks calls that may be sent again after a failure without changing the outcome:
all reads, and the writes whose second execution leaves the same state (start, stop, deletes,
detaches). Reserves, creates and attaches are not repeatable: their idempotency belongs to the
caller, who names what it creates and looks for the name before trying again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PLACEHOLDER = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)\}")


@dataclass(frozen=True)
class Operation:
    operation_id: str
    method: str
    path: str
    """Path template below the API base (`/api/1`), with `{name}` placeholders."""
    query: frozenset[str] = frozenset()
    body: frozenset[str] = frozenset()
    """JSON body fields; a nested field is written `parent.child`."""
    repeatable: bool = False
    long_running: bool = False
    """Creates block until the object exists: they get the client's long read timeout."""
    gone_means_done: bool = False
    """A delete/detach: a 404 on a repeat after a lost answer means the first one worked."""

    def __post_init__(self) -> None:
        if self.method not in {"GET", "POST", "PUT", "DELETE"}:
            raise ValueError(f"{self.operation_id}: unknown method {self.method}")
        if self.method == "GET" and not self.repeatable:
            raise ValueError(f"{self.operation_id}: a read is always repeatable")

    @property
    def path_params(self) -> frozenset[str]:
        return frozenset(_PLACEHOLDER.findall(self.path))


def _read(operation_id: str, path: str, query: set[str] | None = None) -> Operation:
    return Operation(operation_id, "GET", path, query=frozenset(query or ()), repeatable=True)


_CUSTOMER = "/customers/{customer_id}"
_LOCATION = _CUSTOMER + "/locations/{location}"
_CLOUDSPACE = _CUSTOMER + "/cloudspaces/{cloudspace_id}"
_VM = _CLOUDSPACE + "/vms/{vm_id}"

CURRENT_USER = _read("getCurrentUserInfo", "/me")
LIST_LOCATIONS = _read("listLocations", "/locations")
LIST_CUSTOMER_LOCATIONS = _read("listCustomerLocations", _CUSTOMER + "/locations")

LIST_CLOUDSPACES = _read(
    "listCloudspaces", _CUSTOMER + "/cloudspaces", {"include_deleted", "locations"}
)
GET_CLOUDSPACE = _read("getCloudspaceInfo", _CLOUDSPACE)
CREATE_CLOUDSPACE = Operation(
    "createCloudspace",
    "POST",
    _CUSTOMER + "/cloudspaces",
    body=frozenset(
        {
            "name",
            "location",
            "private_network",
            "local_domain",
            "firewall.private",
            "firewall.external_network_id",
            "firewall.parent_cloudspace_id",
        }
    ),
    long_running=True,
)
DELETE_CLOUDSPACE = Operation(
    "deleteCloudspace",
    "DELETE",
    _CLOUDSPACE,
    query=frozenset({"permanently"}),
    repeatable=True,
    long_running=True,
    gone_means_done=True,
)

LIST_VMS = _read("listCloudspaceVirtualMachines", _CLOUDSPACE + "/vms", {"include_deleted"})
GET_VM = _read("getVirtualMachineInfo", _VM)
CREATE_VM = Operation(
    "createVirtualMachine",
    "POST",
    _CLOUDSPACE + "/vms",
    query=frozenset(
        {
            "name",
            "description",
            "vcpus",
            "memory",
            "image_id",
            "disk_size",
            "start_vm",
            "user_data",
            "hostname",
            "private_ip",
            "data_disks",
            "boot_type",
            "enable_vm_agent",
        }
    ),
    body=frozenset({"gpu_id", "vgpu_name"}),
    long_running=True,
)
DELETE_VM = Operation(
    "deleteVirtualMachine",
    "DELETE",
    _VM,
    query=frozenset({"permanently", "detach_gpu", "detach_disks"}),
    repeatable=True,
    long_running=True,
    gone_means_done=True,
)
START_VM = Operation("startVirtualMachine", "POST", _VM + "/start", repeatable=True)
STOP_VM = Operation(
    "stopVirtualMachine", "POST", _VM + "/stop", query=frozenset({"force"}), repeatable=True
)

LIST_VM_NICS = _read("listExternalNetworksVirtualMachine", _VM + "/external-nics")
GET_VM_NIC = _read(
    "getExternalNetworksVirtualMachine", _VM + "/external-nics/{external_ip_address}"
)
ATTACH_EXTERNAL_NIC = Operation(
    "attachExternalNetworksVirtualMachine",
    "POST",
    _VM + "/external-nics",
    query=frozenset(
        {
            "external_network_id",
            "external_network_ip",
            "model",
            "external_network_type",
            "external_cloudspace_id",
        }
    ),
)
DETACH_EXTERNAL_NIC = Operation(
    "detachExternalNetworksVirtualMachine",
    "DELETE",
    _VM + "/external-nics/{external_ip_address}",
    query=frozenset({"external_network_id", "external_network_type", "external_cloudspace_id"}),
    repeatable=True,
    gone_means_done=True,
)

LIST_EXTERNAL_NETWORKS = _read("listExternalNetworks", _LOCATION + "/external-networks")
GET_EXTERNAL_NETWORK = _read(
    "getExternalNetwork", _LOCATION + "/external-networks/{external_network_id}"
)
LIST_FREE_IPS = _read(
    "getExternalNetworkAddresses",
    _LOCATION + "/external-networks/{external_network_id}/ip-addresses",
)
LIST_IMAGES = _read("listCustomerImages", _LOCATION + "/vm-images")

LIST_GPU_PROFILES = _read("listAvailableGPUProfiles", _LOCATION + "/gpus")
RESERVE_VGPU = Operation(
    "reserveVGPU", "POST", _LOCATION + "/gpus/{gpu_id}", body=frozenset({"vgpu_name"})
)
RESERVE_AND_ATTACH_VGPU = Operation(
    "reserveAndAttachVGPUToVM", "POST", _VM + "/gpus/{gpu_id}", body=frozenset({"vgpu_name"})
)
ATTACH_VGPU = Operation("attachVGPUToVM", "POST", _VM + "/vgpus/{vgpu_id}")
DETACH_VGPU = Operation(
    "detachVGPUFromVM", "DELETE", _VM + "/vgpus/{vgpu_id}", repeatable=True, gone_means_done=True
)
LIST_VGPUS = _read(
    "listCustomerVGPUS",
    _LOCATION + "/vgpus",
    {"limit", "start_after", "include_deleted", "only_deleted"},
)
RELEASE_VGPU = Operation(
    "deleteVGPU",
    "DELETE",
    _LOCATION + "/vgpus/{vgpu_id}",
    query=frozenset({"detach", "permanently"}),
    repeatable=True,
    gone_means_done=True,
)
RESTORE_VGPU = Operation("restoreVGPU", "POST", _LOCATION + "/vgpus/{vgpu_id}")

LOCATION_CONSUMPTION = _read("getCustomerConsumption", _LOCATION + "/consumption", {"start", "end"})

ALL_OPERATIONS: tuple[Operation, ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, Operation)
)
