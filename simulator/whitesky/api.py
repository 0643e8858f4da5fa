"""The ``/api/1`` operations: one function per operationId of the description.

Each function reads its inputs the way the description declares them (query parameters for
most creates, a JSON body for a few), calls ``World``, and shapes the answer exactly as the
description's response model says, inconsistencies included: ``cloudspace_id`` is an
integer in VM list items but a string in VM info; ``external_network_id`` is a string in
cloudspace info but an integer elsewhere; ``deletion_time`` is a string in the VM and
cloudspace lists but an integer in VGPUInfo.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.whitesky.errors import BadRequest, NotFound, invalid_parameter
from simulator.whitesky.records import DELETED, Cloudspace, ExternalNetwork, GpuCard, Nic, Vgpu, Vm
from simulator.whitesky.state import World

NIC_MODELS = ("ne2k_pci", "i82551", "i82557b", "i82559er", "rtl8139", "e1000", "pcnet", "virtio")
NETWORK_TYPES = ("external", "cloudspace")
SUCCESS = {"success": True}
_ANSWER_CACHE_SIZE = 256


@dataclass(frozen=True)
class EncodedJson:
    """An answer already encoded as JSON (from the answer cache)."""

    body: bytes


def _cached(world: World, key: tuple[object, ...], build: Callable[[], object]) -> EncodedJson:
    """``build()`` encoded, cached until the world changes: big lists are polled far more
    often than anything changes, and building and encoding them is what costs."""
    encoded = world.render_cache.get(key)
    if encoded is None:
        if len(world.render_cache) >= _ANSWER_CACHE_SIZE:
            world.render_cache.clear()  # odd paging parameters must not grow it unbounded
        encoded = json.dumps(build(), separators=(",", ":")).encode()
        world.render_cache[key] = encoded
    return EncodedJson(encoded)


@dataclass
class Call:
    """One API request, with Flask-RESTX-like readers for its inputs."""

    world: World
    path: dict[str, str]
    query: dict[str, list[str]]
    body: bytes
    host: str

    @property
    def customer_id(self) -> str:
        return self.path["customer_id"]

    def path_int(self, name: str) -> int:
        # Flask routes ints with <int:...>: anything else does not match, hence 404.
        try:
            return int(self.path[name])
        except ValueError:
            raise NotFound(f"{name} must be an integer: {self.path[name]!r}") from None

    def _raw(self, name: str, required: bool) -> str | None:
        values = self.query.get(name)
        if not values:
            if required:
                raise invalid_parameter(name, "Missing required parameter in the query string")
            return None
        return values[-1]

    def string(
        self, name: str, *, required: bool = False, choices: tuple[str, ...] | None = None
    ) -> str | None:
        value = self._raw(name, required)
        if value is not None and choices is not None and value not in choices:
            raise invalid_parameter(
                name, f"The value {value!r} is not a valid choice for {name!r}."
            )
        return value

    def integer(self, name: str, *, required: bool = False) -> int | None:
        value = self._raw(name, required)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise invalid_parameter(name, f"invalid literal for int(): {value!r}") from None

    def required_string(self, name: str, *, choices: tuple[str, ...] | None = None) -> str:
        value = self.string(name, required=True, choices=choices)
        return value if value is not None else ""

    def required_integer(self, name: str) -> int:
        value = self.integer(name, required=True)
        return value if value is not None else 0

    def boolean(self, name: str, default: bool) -> bool:
        value = self._raw(name, False)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise invalid_parameter(name, f"Invalid literal for boolean(): {value}")

    def csv(self, name: str) -> list[str]:
        value = self._raw(name, False)
        return [item for item in (value or "").split(",") if item]

    def json_body(self, *, required: bool) -> dict[str, Any]:
        if not self.body.strip():
            if required:
                raise BadRequest(
                    "Input payload validation failed: payload: a JSON body is required"
                )
            return {}
        try:
            body = json.loads(self.body)
        except ValueError:
            raise BadRequest(
                "The browser (or proxy) sent a request that this server could not understand."
            ) from None
        if not isinstance(body, dict):
            raise invalid_parameter("payload", f"{body!r} is not of type 'object'")
        return body


def _body_field(body: dict[str, Any], name: str, kind: type, *, required: bool) -> Any:
    if name not in body or body[name] is None:
        if required:
            raise invalid_parameter(name, f"'{name}' is a required property")
        return None
    value = body[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise invalid_parameter(name, f"{value!r} is not of type '{kind.__name__}'")
    return value


# ---- me and locations ----------------------------------------------------------------------


def get_current_user_info(call: Call) -> object:
    tables = call.world.tables
    customer = {
        "customer_id": tables.customer.customer_id,
        "name": tables.customer.name,
        "address": tables.customer.address,
        "phone_number": tables.customer.phone_number,
        "status": tables.customer.status,
    }
    return {
        "username": tables.user.username,
        "firstname": tables.user.firstname,
        "lastname": tables.user.lastname,
        "email": tables.user.email,
        "emails": [tables.user.email],
        "is_admin": False,
        # The simulator is its own IAM: refresh at http://<iam_domain>/v1/oauth/jwt/refresh.
        "iam_domain": call.host,
        "vco_website": f"http://{call.host}",
        "vco_name": "whitesky simulator",
        "vco_support_email": "support@example.com",
        "customers": [customer],
        "admin_of_customers": [customer],
    }


def list_locations(call: Call) -> object:
    result = []
    for location in call.world.tables.locations.values():
        datacenter = {
            "address": "",
            "city": "",
            "code": location.name,
            "coordinates": [0.0, 0.0],
            "country": "",
            "country_code": "",
            "created_at": 1_600_000_000.0,
            "created_by": "simulator",
            "name": location.name,
        }
        datacenter.update(location.datacenter)
        result.append({"name": location.name, "datacenter": datacenter})
    return {"result": result}


def list_customer_locations(call: Call) -> object:
    call.world.check_customer(call.customer_id)
    tables = call.world.tables
    return {
        "currency": tables.currency,
        "locations": [
            {"location": location.name, "resources": dict(location.prices)}
            for location in tables.locations.values()
        ],
    }


def list_customer_images(call: Call) -> object:
    call.boolean("include_logo", False)
    images = call.world.images_in(call.customer_id, call.path["location"])
    return {
        "result": [
            {
                "image_id": image.image_id,
                "status": image.status,
                "name": image.name,
                "description": image.description,
                "os_type": image.os_type,
                "boot_disk_size": image.boot_disk_size,
                "size": image.size,
                "memory": image.memory,
                "tags": "",
                "public": True,
                "categories": "",
                "docs_url": "",
                "logo": "",
            }
            for image in images
        ]
    }


# ---- cloudspaces ----------------------------------------------------------------------------


def _deleted_filter(call: Call) -> str:
    if call.boolean("only_deleted", False):
        return "only"
    return "include" if call.boolean("include_deleted", False) else "exclude"


def _cloudspace_item(cloudspace: Cloudspace) -> dict[str, Any]:
    uplinks = []
    if cloudspace.external_network_id is not None:
        uplinks = [
            [
                {
                    "id": cloudspace.external_network_id,
                    "metric": 0,
                    "ip": cloudspace.external_network_ip,
                    "type": "external",
                }
            ]
        ]
    return {
        "cloudspace_id": cloudspace.cloudspace_id,
        "status": cloudspace.status,
        "deletion_time": str(cloudspace.deletion_time),
        "external_network_ip": cloudspace.external_network_ip,
        "external_networks": uplinks,
        "name": cloudspace.name,
        "update_time": cloudspace.update_time,
        "creation_time": cloudspace.creation_time,
        "router_type": "vgw",
        "cloudspace_mode": "public" if cloudspace.external_network_id is not None else "private",
        "private_network": cloudspace.private_network,
        "location": cloudspace.location,
    }


def list_cloudspaces(call: Call) -> object:
    deleted = _deleted_filter(call)
    call.boolean("include_disabled", True)
    call.boolean("filter_storage_only", False)
    wanted = set(call.csv("locations"))
    cloudspaces = [
        cs
        for cs in call.world.cloudspaces(call.customer_id)
        if (not wanted or cs.location in wanted)
        and (deleted == "include" or (cs.status == DELETED) == (deleted == "only"))
    ]
    locations = [
        {"location": name, "status": "OK"}
        for name in call.world.tables.locations
        if not wanted or name in wanted
    ]
    return {"locations": locations, "result": [_cloudspace_item(cs) for cs in cloudspaces]}


def get_cloudspace_info(call: Call) -> object:
    cloudspace = call.world.cloudspace(call.customer_id, call.path["cloudspace_id"])
    return {
        "cloudspace_id": cloudspace.cloudspace_id,
        "status": cloudspace.status,
        "external_network_ip": cloudspace.external_network_ip,
        "external_network_id": (
            str(cloudspace.external_network_id)
            if cloudspace.external_network_id is not None
            else ""
        ),
        "private_network": cloudspace.private_network,
        "name": cloudspace.name,
        "local_domain": cloudspace.local_domain,
        "update_time": cloudspace.update_time,
        "creation_time": cloudspace.creation_time,
        "router_type": "vgw",
        "location": cloudspace.location,
        "cloudspace_mode": "public" if cloudspace.external_network_id is not None else "private",
        "resource_limits": {
            "memory_quota": -1.0,
            "vdisk_space_quota": -1,
            "public_ip_quota": -1,
            "vcpu_quota": -1,
            "external_network_quota": -1,
        },
    }


def create_cloudspace(call: Call) -> object:
    body = call.json_body(required=True)
    name = _body_field(body, "name", str, required=True)
    location = _body_field(body, "location", str, required=True)
    firewall = _body_field(body, "firewall", dict, required=True)
    _body_field(firewall, "private", bool, required=True)
    custom = _body_field(firewall, "custom", dict, required=False) or {}
    if custom.get("image_id") is not None and custom.get("cdrom_id") is not None:
        raise BadRequest("image_id and and cdrom_id passed together")
    cloudspace = call.world.create_cloudspace(
        call.customer_id,
        name=name,
        location=location,
        private_network=_body_field(body, "private_network", str, required=False)
        or "192.168.103.0/24",
        external_network_id=_body_field(firewall, "external_network_id", int, required=False),
        parent_cloudspace_id=_body_field(firewall, "parent_cloudspace_id", str, required=False),
        local_domain=_body_field(body, "local_domain", str, required=False) or "",
    )
    return {"cloudspace_id": cloudspace.cloudspace_id}


def delete_cloudspace(call: Call) -> object:
    call.string("reason")
    call.world.delete_cloudspace(
        call.customer_id, call.path["cloudspace_id"], permanently=call.boolean("permanently", False)
    )
    return SUCCESS


# ---- virtual machines -----------------------------------------------------------------------


def _nic_address(world: World, nic: Nic) -> str:
    if world.switches["nic_ip_with_prefix"]:
        return f"{nic.ip_address}/{nic.prefix_length}"
    return nic.ip_address


def _devices(world: World, vm: Vm) -> list[dict[str, Any]]:
    devices = []
    for vgpu_id in vm.vgpu_ids:
        vgpu = world.tables.vgpus[vgpu_id]
        card = world.tables.cards[vgpu.gpu_id]
        devices.append(
            {
                "reference_id": vgpu_id,
                "type": "VGPU",
                "description": f"{card.vendor} {card.profile_model} ({vgpu.vgpu_name})",
            }
        )
    return devices


def _vm_list_item(world: World, vm: Vm) -> dict[str, Any]:
    interfaces = []
    if world.switches["vm_has_private_nic"]:
        interfaces.append(
            {
                "device_name": "eth0",
                "mac_address": vm.private_mac,
                "ip_address": vm.private_ip,
                "network_id": 0,
                "model": "virtio",
                "external_network_type": "",
                "external_cloudspace_id": "",
            }
        )
    for nic in world.nics_of(vm):
        interfaces.append(
            {
                "device_name": nic.device_name,
                "mac_address": nic.mac_address,
                "ip_address": _nic_address(world, nic),
                "network_id": nic.network_id,
                "model": nic.model,
                "external_network_type": nic.nic_type.lower(),
                "external_cloudspace_id": nic.external_cloudspace_id,
            }
        )
    return {
        "vm_id": vm.vm_id,
        "name": vm.name,
        "cloudspace_id": world.tables.cloudspaces[vm.cloudspace_id].numeric_id,
        "status": vm.status,
        "deletion_time": str(int(vm.deletion_time)),
        "stack_id": 1,
        "creation_time": vm.creation_time,
        "update_time": vm.update_time,
        "reference_id": f"vm-{vm.vm_id}",
        "image_id": vm.image_id,
        "storage": vm.disk_size,
        "vcpus": vm.vcpus,
        "memory": vm.memory,
        "appliance": False,
        "disks": [vm.boot_disk_id],
        "tpm_enabled": False,
        "backup_status": "",
        "network_interfaces": interfaces,
        "devices": _devices(world, vm),
    }


def _nic_struct(world: World, nic: Nic) -> dict[str, Any]:
    return {
        "device_name": nic.device_name,
        "mac_address": nic.mac_address,
        "ip_address": _nic_address(world, nic),
        "network_id": nic.network_id,
        "nic_type": nic.nic_type,
        "model": nic.model,
        "external_cloudspace_id": nic.external_cloudspace_id,
    }


def list_cloudspace_virtual_machines(call: Call) -> object:
    deleted = _deleted_filter(call)
    call.boolean("include_connected", False)
    call.boolean("exclude_internal", False)
    world = call.world
    cloudspace_id = call.path["cloudspace_id"]
    vms = world.vms_in(call.customer_id, cloudspace_id, deleted=deleted)
    return _cached(
        world,
        ("listCloudspaceVirtualMachines", cloudspace_id, deleted),
        lambda: {"result": [_vm_list_item(world, vm) for vm in vms]},
    )


def get_virtual_machine_info(call: Call) -> object:
    world = call.world
    vm = world.vm(call.customer_id, call.path["cloudspace_id"], call.path_int("vm_id"))
    image = world.tables.images[vm.image_id]
    interfaces = []
    if world.switches["vm_has_private_nic"]:
        interfaces.append(
            {
                "device_name": "eth0",
                "mac_address": vm.private_mac,
                "ip_address": vm.private_ip,
                "network_id": 0,
                "nic_type": "INTERNAL",
                "model": "virtio",
                "external_cloudspace_id": "",
            }
        )
    interfaces.extend(_nic_struct(world, nic) for nic in world.nics_of(vm))
    return {
        "backup_policies": [],
        "name": vm.name,
        "vm_id": vm.vm_id,
        "description": vm.description,
        "boot_disk_id": vm.boot_disk_id,
        "cloudspace_id": vm.cloudspace_id,
        "status": vm.status,
        "update_time": vm.update_time,
        "creation_time": vm.creation_time,
        "vcpus": vm.vcpus,
        "storage": vm.disk_size,
        "memory": vm.memory,
        "agent_status": "running" if vm.status == "RUNNING" else "not_running",
        "image_id": vm.image_id,
        "locked": False,
        "stack_id": 1,
        "impact_alert_hook": "",
        "os_image_name": image.name,
        "hostname": vm.hostname,
        "anti_affinity_group_ids": [],
        "disks": [
            {
                "status": "ASSIGNED",
                "disk_size": vm.disk_size,
                "disk_name": f"Boot disk of {vm.name}",
                "description": "Machine boot disk",
                "exposed": False,
                "pci_bus": 0,
                "pci_slot": 5,
                "disk_id": vm.boot_disk_id,
                "disk_type": "BOOT",
                "order": "0",
            }
        ],
        "os_accounts": [{"login": "user", "password": f"sim-{vm.vm_id}"}],
        "network_interfaces": interfaces,
        "appliance": False,
        "cpus_pin_status": False,
        "boot_type": "bios",
        "cpu_topology": {"cores": vm.vcpus, "threads": 1, "sockets": 1},
        "devices": _devices(world, vm),
        "tpm_enabled": False,
    }


def create_virtual_machine(call: Call) -> object:
    name = call.required_string("name")
    description = call.required_string("description")
    vcpus = call.required_integer("vcpus")
    memory = call.required_integer("memory")
    call.csv("data_disks")
    call.string("os_type", choices=("Linux", "Windows", "Unix", "BSD", "Darwin", "Other"))
    call.string("boot_type", choices=("bios", "uefi", "uefi-secure-boot"))
    for unsupported in ("cdrom_id", "boot_disk_id", "snapshot_id"):
        if call.string(unsupported):
            raise BadRequest(f"{unsupported}: the simulator creates VMs from images only")
    body = call.json_body(required=False)
    gpu_id = _body_field(body, "gpu_id", str, required=False) or ""
    vgpu_name = _body_field(body, "vgpu_name", str, required=False) or ""
    userdata = _body_field(body, "userdata", dict, required=False)
    user_data = call.string("user_data") or (json.dumps(userdata) if userdata else "")
    if not name:
        raise invalid_parameter("name", "must not be empty")
    vm = call.world.create_vm(
        call.customer_id,
        call.path["cloudspace_id"],
        name=name,
        description=description,
        vcpus=vcpus,
        memory=memory,
        image_id=call.integer("image_id"),
        disk_size=call.integer("disk_size"),
        start_vm=call.boolean("start_vm", True),
        hostname=call.string("hostname"),
        user_data=user_data,
        gpu_id=gpu_id,
        vgpu_name=vgpu_name,
    )
    return {"vm_id": vm.vm_id}


def delete_virtual_machine(call: Call) -> object:
    call.boolean("detach_disks", False)
    call.world.delete_vm(
        call.customer_id,
        call.path["cloudspace_id"],
        call.path_int("vm_id"),
        permanently=call.boolean("permanently", False),
        detach_gpu=call.boolean("detach_gpu", False),
    )
    return SUCCESS


def start_virtual_machine(call: Call) -> object:
    call.integer("rescue_disk_id")
    call.world.start_vm(call.customer_id, call.path["cloudspace_id"], call.path_int("vm_id"))
    return SUCCESS


def stop_virtual_machine(call: Call) -> object:
    call.boolean("force", False)
    call.world.stop_vm(call.customer_id, call.path["cloudspace_id"], call.path_int("vm_id"))
    return SUCCESS


# ---- external networks and NICs -------------------------------------------------------------


def _network_model(network: ExternalNetwork) -> dict[str, Any]:
    cidr = ipaddress.IPv4Network(network.cidr)
    return {
        "external_network_id": network.external_network_id,
        "network": str(cidr.network_address),
        "gateway": network.gateway,
        "dhcp": network.dhcp,
        "subnet_mask": str(cidr.netmask),
        "name": network.name,
        "public": network.public,
    }


def list_external_networks(call: Call) -> object:
    networks = call.world.networks_in(call.customer_id, call.path["location"])
    return {"result": [_network_model(network) for network in networks]}


def get_external_network(call: Call) -> object:
    network_id = call.path_int("external_network_id")
    return _network_model(call.world.network(call.customer_id, call.path["location"], network_id))


def get_external_network_addresses(call: Call) -> object:
    network_id = call.path_int("external_network_id")
    network = call.world.network(call.customer_id, call.path["location"], network_id)
    return {"ip_addresses": call.world.free_addresses(network)}


def list_external_networks_virtual_machine(call: Call) -> object:
    world = call.world
    vm = world.vm(call.customer_id, call.path["cloudspace_id"], call.path_int("vm_id"))
    return {"result": [_nic_struct(world, nic) for nic in world.nics_of(vm)]}


def get_external_networks_virtual_machine(call: Call) -> object:
    nic = call.world.nic(
        call.customer_id,
        call.path["cloudspace_id"],
        call.path_int("vm_id"),
        call.path["external_ip_address"],
    )
    return _nic_struct(call.world, nic)


def attach_external_networks_virtual_machine(call: Call) -> object:
    network_id = call.required_integer("external_network_id")
    call.world.attach_nic(
        call.customer_id,
        call.path["cloudspace_id"],
        call.path_int("vm_id"),
        network_id=network_id,
        network_type=call.string("external_network_type", choices=NETWORK_TYPES) or "external",
        address=call.string("external_network_ip"),
        model=call.string("model", choices=NIC_MODELS) or "virtio",
    )
    # Only {success}: the caller finds the new NIC (MAC, address) by listing the VM's NICs.
    return SUCCESS


def detach_external_networks_virtual_machine(call: Call) -> object:
    network_id = call.required_integer("external_network_id")
    network_type = call.required_string("external_network_type", choices=NETWORK_TYPES)
    call.world.detach_nic(
        call.customer_id,
        call.path["cloudspace_id"],
        call.path_int("vm_id"),
        address=call.path["external_ip_address"],
        network_id=network_id,
        network_type=network_type,
    )
    return SUCCESS


# ---- GPUs and vGPUs --------------------------------------------------------------------------


def _profile(card: GpuCard) -> dict[str, Any]:
    return {
        "id": card.gpu_id,
        "model": card.profile_model,
        "vendor": card.vendor,
        "description": card.description,
        "available_instances": card.available_instances,
    }


def _vgpu_info(world: World, vgpu: Vgpu) -> dict[str, Any]:
    tables = world.tables
    virtual_machine: dict[str, Any] | None
    if vgpu.vm_id is not None:
        vm = tables.vms[vgpu.vm_id]
        cloudspace = tables.cloudspaces[vm.cloudspace_id]
        virtual_machine = {
            "id": vm.vm_id,
            "name": vm.name,
            "cloudspace_id": cloudspace.cloudspace_id,
            "cloudspace_name": cloudspace.name,
        }
    elif world.switches["unassigned_vgpu_vm_null"]:
        virtual_machine = None
    else:
        virtual_machine = {"id": 0, "name": "", "cloudspace_id": "", "cloudspace_name": ""}
    return {
        "account_id": tables.locations[vgpu.location].account_id,
        "customer_id": tables.customer.customer_id,
        "customer_name": tables.customer.name,
        "vgpu_id": vgpu.vgpu_id,
        "vgpu_name": vgpu.vgpu_name,
        "gpu_id": vgpu.gpu_id,
        "description": tables.cards[vgpu.gpu_id].description,
        "status": vgpu.status,
        "virtual_machine": virtual_machine,
        "deletion_time": vgpu.deletion_time,
        "location": vgpu.location,
    }


def list_available_gpu_profiles(call: Call) -> object:
    cards = call.world.cards_in(call.customer_id, call.path["location"])
    return {"result": [_profile(card) for card in cards]}


def reserve_vgpu(call: Call) -> object:
    name = _body_field(call.json_body(required=True), "vgpu_name", str, required=True)
    vgpu = call.world.reserve_vgpu(
        call.customer_id, call.path["location"], call.path["gpu_id"], name
    )
    return {"vgpu_id": vgpu.vgpu_id}


def reserve_and_attach_vgpu_to_vm(call: Call) -> object:
    name = _body_field(call.json_body(required=True), "vgpu_name", str, required=True)
    vgpu = call.world.reserve_and_attach_vgpu(
        call.customer_id,
        call.path["cloudspace_id"],
        call.path_int("vm_id"),
        call.path["gpu_id"],
        name,
    )
    return {"vgpu_id": vgpu.vgpu_id}


def attach_vgpu_to_vm(call: Call) -> object:
    call.world.attach_vgpu(
        call.customer_id, call.path["cloudspace_id"], call.path_int("vm_id"), call.path["vgpu_id"]
    )
    return SUCCESS


def detach_vgpu_from_vm(call: Call) -> object:
    call.world.detach_vgpu(
        call.customer_id, call.path["cloudspace_id"], call.path_int("vm_id"), call.path["vgpu_id"]
    )
    return SUCCESS


def list_customer_vgpus(call: Call) -> object:
    limit = call.integer("limit")
    limit = 25 if limit is None else limit
    start_after = call.integer("start_after") or 0
    if limit < 0:
        raise invalid_parameter("limit", "must be 0 (no limit) or more")
    if start_after < 0:
        raise invalid_parameter("start_after", "must be 0 or more")
    location, deleted = call.path["location"], _deleted_filter(call)
    world = call.world
    vgpus = world.vgpus_in(call.customer_id, location, deleted=deleted)

    def build() -> object:
        count = len(vgpus)
        # start_after is an offset into the whole (filtered) list: 0 starts at the first.
        page = vgpus[start_after : start_after + limit] if limit else vgpus[start_after:]
        pages = math.ceil(count / limit) if limit else (1 if count else 0)
        return {
            "pagination": {"limit": limit, "pages": pages, "count": count},
            "data": [_vgpu_info(world, vgpu) for vgpu in page],
        }

    return _cached(world, ("listCustomerVGPUS", location, deleted, limit, start_after), build)


def delete_vgpu(call: Call) -> object:
    call.world.delete_vgpu(
        call.customer_id,
        call.path["location"],
        call.path["vgpu_id"],
        detach=call.boolean("detach", True),
        permanently=call.boolean("permanently", False),
    )
    return SUCCESS


def restore_vgpu(call: Call) -> object:
    call.world.restore_vgpu(call.customer_id, call.path["location"], call.path["vgpu_id"])
    return SUCCESS


def get_customer_consumption(call: Call) -> object:
    end = call.required_integer("end")
    start = call.required_integer("start")
    return call.world.consumption(call.customer_id, call.path["location"], start, end)


# ---- the route table -------------------------------------------------------------------------

Handler = Callable[[Call], object]

_CS = "/customers/{customer_id}/cloudspaces/{cloudspace_id}"
_VM = _CS + "/vms/{vm_id}"
_LOC = "/customers/{customer_id}/locations/{location}"

# (method, path template under /api/1, operationId, handler)
ROUTES: tuple[tuple[str, str, str, Handler], ...] = (
    ("GET", "/me", "getCurrentUserInfo", get_current_user_info),
    ("GET", "/locations", "listLocations", list_locations),
    ("GET", "/customers/{customer_id}/locations", "listCustomerLocations", list_customer_locations),
    ("GET", "/customers/{customer_id}/cloudspaces", "listCloudspaces", list_cloudspaces),
    ("POST", "/customers/{customer_id}/cloudspaces", "createCloudspace", create_cloudspace),
    ("GET", _CS, "getCloudspaceInfo", get_cloudspace_info),
    ("DELETE", _CS, "deleteCloudspace", delete_cloudspace),
    ("GET", _CS + "/vms", "listCloudspaceVirtualMachines", list_cloudspace_virtual_machines),
    ("POST", _CS + "/vms", "createVirtualMachine", create_virtual_machine),
    ("GET", _VM, "getVirtualMachineInfo", get_virtual_machine_info),
    ("DELETE", _VM, "deleteVirtualMachine", delete_virtual_machine),
    ("POST", _VM + "/start", "startVirtualMachine", start_virtual_machine),
    ("POST", _VM + "/stop", "stopVirtualMachine", stop_virtual_machine),
    (
        "GET",
        _VM + "/external-nics",
        "listExternalNetworksVirtualMachine",
        list_external_networks_virtual_machine,
    ),
    (
        "POST",
        _VM + "/external-nics",
        "attachExternalNetworksVirtualMachine",
        attach_external_networks_virtual_machine,
    ),
    (
        "GET",
        _VM + "/external-nics/{external_ip_address}",
        "getExternalNetworksVirtualMachine",
        get_external_networks_virtual_machine,
    ),
    (
        "DELETE",
        _VM + "/external-nics/{external_ip_address}",
        "detachExternalNetworksVirtualMachine",
        detach_external_networks_virtual_machine,
    ),
    ("POST", _VM + "/gpus/{gpu_id}", "reserveAndAttachVGPUToVM", reserve_and_attach_vgpu_to_vm),
    ("POST", _VM + "/vgpus/{vgpu_id}", "attachVGPUToVM", attach_vgpu_to_vm),
    ("DELETE", _VM + "/vgpus/{vgpu_id}", "detachVGPUFromVM", detach_vgpu_from_vm),
    ("GET", _LOC + "/external-networks", "listExternalNetworks", list_external_networks),
    (
        "GET",
        _LOC + "/external-networks/{external_network_id}",
        "getExternalNetwork",
        get_external_network,
    ),
    (
        "GET",
        _LOC + "/external-networks/{external_network_id}/ip-addresses",
        "getExternalNetworkAddresses",
        get_external_network_addresses,
    ),
    ("GET", _LOC + "/vm-images", "listCustomerImages", list_customer_images),
    ("GET", _LOC + "/gpus", "listAvailableGPUProfiles", list_available_gpu_profiles),
    ("POST", _LOC + "/gpus/{gpu_id}", "reserveVGPU", reserve_vgpu),
    ("GET", _LOC + "/vgpus", "listCustomerVGPUS", list_customer_vgpus),
    ("DELETE", _LOC + "/vgpus/{vgpu_id}", "deleteVGPU", delete_vgpu),
    ("POST", _LOC + "/vgpus/{vgpu_id}", "restoreVGPU", restore_vgpu),
    ("GET", _LOC + "/consumption", "getCustomerConsumption", get_customer_consumption),
)
