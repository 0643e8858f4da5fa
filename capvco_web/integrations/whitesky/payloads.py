"""Reading whitesky's answers into our types (`types.py`): each payload's shape checked,
its fields normalised.

Parsing is lenient about fields we only display (a missing description becomes "") and strict
about identities (a vGPU without `vgpu_id` is an `UnexpectedResponse`), because a record we
cannot identify is one we cannot own or release.

The description is not consistent about a few types (`cloudspace_id` is an integer in the VM
list and a string in VM get; `external_network_id` likewise); they are normalised here, once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .errors import UnexpectedResponse
from .operations import Operation
from .types import (
    PCI_SUFFIX,
    Cloudspace,
    CloudspaceConsumption,
    Consumption,
    CurrentUser,
    CustomerLocation,
    ExternalNetwork,
    GpuProfile,
    Image,
    Location,
    Vgpu,
    Vm,
    VmDevice,
    VmNic,
)

Json = dict[str, Any]
R = TypeVar("R")


def payload_read(op: Operation, read: Callable[[Any], R], payload: Any) -> R:
    """`read(payload)`, an `UnexpectedResponse` of it naming the operation `op`."""
    try:
        return read(payload)
    except UnexpectedResponse as exc:
        exc.operation = exc.operation or op.operation_id
        raise


def as_object(value: Any, what: str) -> Json:
    if not isinstance(value, dict):
        raise UnexpectedResponse(f"expected an object for {what}, got {type(value).__name__}")
    return value


def as_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise UnexpectedResponse(f"expected a list for {what}, got {type(value).__name__}")
    return value


def result_list(payload: Any, what: str) -> list[Any]:
    """The `{"result": [...]}` envelope of the unpaginated lists."""
    return as_list(as_object(payload, what).get("result"), f"{what}.result")


def _text(data: Json, key: str) -> str:
    value = data.get(key)
    return "" if value is None else str(value)


def _optional_int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _int(data: Json, key: str, default: int = 0) -> int:
    value = _optional_int(data.get(key))
    return default if value is None else value


def _required_int(data: Json, key: str, what: str) -> int:
    value = _optional_int(data.get(key))
    if value is None:
        raise UnexpectedResponse(f"{what} without a usable {key}: {data.get(key)!r}")
    return value


def _required_id(data: Json, key: str, what: str) -> str:
    value = data.get(key)
    if value is None or isinstance(value, bool) or str(value) == "":
        raise UnexpectedResponse(f"{what} without {key}")
    return str(value)


def _optional_id(value: Any) -> str | None:
    """Ids the description types as int in one place and str in another: always str."""
    if value is None or isinstance(value, bool) or str(value) == "":
        return None
    return str(value)


def _units(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    units: dict[str, float] = {}
    for key, amount in value.items():
        if isinstance(amount, int | float) and not isinstance(amount, bool):
            units[str(key)] = float(amount)
    return units


def split_ip(value: str) -> tuple[str, int | None]:
    """`10.0.0.5/24` -> (`10.0.0.5`, 24); `10.0.0.5` -> (`10.0.0.5`, None)."""
    address, _, prefix = value.strip().partition("/")
    return address, (int(prefix) if prefix.isdigit() else None)


def pci_address_of(model: str) -> str | None:
    match = PCI_SUFFIX.search(model)
    return match.group(1).lower() if match else None


def parse_current_user(payload: Any) -> CurrentUser:
    data = as_object(payload, "user")

    def customer_ids(key: str) -> tuple[str, ...]:
        entries = data.get(key) or []
        return tuple(
            str(entry["customer_id"])
            for entry in as_list(entries, key)
            if isinstance(entry, dict) and entry.get("customer_id") is not None
        )

    return CurrentUser(
        username=_text(data, "username"),
        email=_text(data, "email"),
        iam_domain=_text(data, "iam_domain"),
        customer_ids=customer_ids("customers"),
        admin_of_customer_ids=customer_ids("admin_of_customers"),
    )


def parse_location(payload: Any) -> Location:
    data = as_object(payload, "location")
    datacenter = data.get("datacenter")
    datacenter = datacenter if isinstance(datacenter, dict) else {}
    return Location(
        name=_required_id(data, "name", "location"),
        datacenter_name=_text(datacenter, "name"),
        city=_text(datacenter, "city"),
        country_code=_text(datacenter, "country_code"),
    )


def parse_customer_locations(payload: Any) -> list[CustomerLocation]:
    data = as_object(payload, "customer locations")
    currency = _text(data, "currency")
    locations = []
    for entry in as_list(data.get("locations"), "customer locations.locations"):
        item = as_object(entry, "customer location")
        locations.append(
            CustomerLocation(
                name=_required_id(item, "location", "customer location"),
                currency=currency,
                prices=_units(item.get("resources")),
            )
        )
    return locations


def parse_cloudspace(payload: Any) -> Cloudspace:
    data = as_object(payload, "cloudspace")
    return Cloudspace(
        cloudspace_id=_required_id(data, "cloudspace_id", "cloudspace"),
        name=_text(data, "name"),
        location=_text(data, "location"),
        status=_text(data, "status"),
        private_network=_text(data, "private_network"),
        external_network_ip=_text(data, "external_network_ip"),
    )


def parse_vm_nic(payload: Any) -> VmNic:
    data = as_object(payload, "network interface")
    ip, prefix_len = split_ip(_text(data, "ip_address"))
    nic_type = data.get("nic_type")
    if nic_type is None:  # the VM list calls it external_network_type
        nic_type = data.get("external_network_type")
    return VmNic(
        mac=_text(data, "mac_address").lower(),
        ip=ip,
        prefix_len=prefix_len,
        network_id=_optional_int(data.get("network_id")),
        nic_type="" if nic_type is None else str(nic_type),
        model=_text(data, "model"),
        device_name=_text(data, "device_name"),
        external_cloudspace_id=_text(data, "external_cloudspace_id"),
    )


def parse_vm(payload: Any) -> Vm:
    data = as_object(payload, "virtual machine")
    nics = data.get("network_interfaces") or []
    devices = data.get("devices") or []
    return Vm(
        vm_id=_required_int(data, "vm_id", "virtual machine"),
        name=_text(data, "name"),
        status=_text(data, "status"),
        cloudspace_id=_optional_id(data.get("cloudspace_id")),
        vcpus=_int(data, "vcpus"),
        memory_mib=_int(data, "memory"),
        image_id=_optional_int(data.get("image_id")),
        description=_text(data, "description"),
        hostname=_text(data, "hostname"),
        nics=tuple(parse_vm_nic(nic) for nic in as_list(nics, "network_interfaces")),
        devices=tuple(
            VmDevice(
                reference_id=_text(device, "reference_id"),
                type=_text(device, "type"),
                description=_text(device, "description"),
            )
            for device in (as_object(d, "device") for d in as_list(devices, "devices"))
        ),
        deletion_time=_deletion_time(data.get("deletion_time")),
    )


def _deletion_time(value: Any) -> str | None:
    """The lists send a string, "0" (or 0, or "") for "not deleted"."""
    text = _optional_id(value)
    return None if text in (None, "0", "0.0") else text


def parse_external_network(payload: Any) -> ExternalNetwork:
    data = as_object(payload, "external network")
    return ExternalNetwork(
        external_network_id=_required_int(data, "external_network_id", "external network"),
        name=_text(data, "name"),
        network=_text(data, "network"),
        gateway=_text(data, "gateway"),
        subnet_mask=_text(data, "subnet_mask"),
        dhcp=bool(data.get("dhcp", False)),
        public=bool(data.get("public", False)),
    )


def parse_image(payload: Any) -> Image:
    data = as_object(payload, "image")
    return Image(
        image_id=_required_int(data, "image_id", "image"),
        name=_text(data, "name"),
        status=_text(data, "status"),
        os_type=_text(data, "os_type"),
        description=_text(data, "description"),
        boot_disk_size=_optional_int(data.get("boot_disk_size")),
    )


def parse_gpu_profile(payload: Any) -> GpuProfile:
    data = as_object(payload, "GPU profile")
    model = _text(data, "model")
    return GpuProfile(
        id=_required_id(data, "id", "GPU profile"),
        vendor=_text(data, "vendor"),
        model=model,
        pci_address=pci_address_of(model),
        description=_text(data, "description"),
        available_instances=_int(data, "available_instances"),
    )


def parse_vgpu(payload: Any) -> Vgpu:
    data = as_object(payload, "vGPU")
    machine = data.get("virtual_machine")
    machine = machine if isinstance(machine, dict) else {}
    vm_id = _optional_int(machine.get("id"))
    if vm_id is not None and vm_id <= 0:  # an unassigned vGPU may carry a zeroed VM
        vm_id = None
    deletion_time = _optional_int(data.get("deletion_time"))
    return Vgpu(
        vgpu_id=_required_id(data, "vgpu_id", "vGPU"),
        name=_text(data, "vgpu_name"),
        gpu_id=_text(data, "gpu_id"),
        status=_text(data, "status"),
        location=_text(data, "location"),
        description=_text(data, "description"),
        vm_id=vm_id,
        vm_name=(_text(machine, "name") or None) if vm_id is not None else None,
        cloudspace_id=_optional_id(machine.get("cloudspace_id")) if vm_id is not None else None,
        deletion_time=deletion_time or None,
    )


def parse_consumption(payload: Any) -> Consumption:
    data = as_object(payload, "consumption")
    unassigned_vgpus: dict[str, float] = {}
    for entry in as_list(data.get("unassigned_vgpus") or [], "unassigned_vgpus"):
        item = as_object(entry, "unassigned vGPU")
        vgpu_id = _required_id(item, "vgpu_id", "unassigned vGPU")
        unassigned_vgpus[vgpu_id] = _units(item.get("consumption")).get("vgu", 0.0)
    unassigned_disks: dict[int, Mapping[str, float]] = {}
    for entry in as_list(data.get("unassigned_disks") or [], "unassigned_disks"):
        item = as_object(entry, "unassigned disk")
        disk_id = _required_int(item, "disk_id", "unassigned disk")
        unassigned_disks[disk_id] = _units(item.get("consumption"))
    cloudspaces = []
    for entry in as_list(data.get("cloudspaces") or [], "cloudspaces"):
        item = as_object(entry, "cloudspace consumption")
        vms: dict[int, Mapping[str, float]] = {}
        vm_names: dict[int, str] = {}
        for vm_entry in as_list(item.get("vms") or [], "cloudspace consumption vms"):
            vm = as_object(vm_entry, "VM consumption")
            vm_id = _required_int(vm, "vm_id", "VM consumption")
            vms[vm_id] = _units(vm.get("consumption"))
            vm_names[vm_id] = _text(vm, "name")
        cloudspaces.append(
            CloudspaceConsumption(
                cloudspace_id=_required_id(item, "cloudspace_id", "cloudspace consumption"),
                name=_text(item, "name"),
                totals=_units(item.get("consumption")),
                vms=vms,
                vm_names=vm_names,
            )
        )
    return Consumption(
        name=_text(data, "name"),
        totals=_units(data.get("consumption")),
        unassigned_vgpus=unassigned_vgpus,
        unassigned_disks=unassigned_disks,
        cloudspaces=tuple(cloudspaces),
    )


# --- readers of whole answers ---------------------------------------------------------


def listing_of(parse: Callable[[Any], R]) -> Callable[[Any], list[R]]:
    """A reader of the `{"result": [...]}` envelope, each entry read by `parse`."""

    def read(payload: Any) -> list[R]:
        return [parse(entry) for entry in result_list(payload, "listing")]

    return read


def id_field(key: str) -> Callable[[Any], str]:
    """A reader of `{key: id}` answers (ids as strings)."""

    def read(payload: Any) -> str:
        value = as_object(payload, key).get(key)
        if value is None or isinstance(value, bool) or str(value) == "":
            raise UnexpectedResponse(f"answer without {key}")
        return str(value)

    return read


def int_field(key: str) -> Callable[[Any], int]:
    """A reader of `{key: integer id}` answers."""

    def read(payload: Any) -> int:
        value = as_object(payload, key).get(key)
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise UnexpectedResponse(f"answer without a usable {key}: {value!r}")
        try:
            return int(value)
        except ValueError:
            raise UnexpectedResponse(f"answer without a usable {key}: {value!r}") from None

    return read


def vgpu_page(payload: Any) -> tuple[int, list[Vgpu]]:
    page = as_object(payload, "vGPU page")
    pagination = as_object(page.get("pagination"), "vGPU page pagination")
    count = pagination.get("count")
    if isinstance(count, bool) or not isinstance(count, int):
        raise UnexpectedResponse(f"vGPU page without a usable pagination.count: {count!r}")
    data = as_list(page.get("data"), "vGPU page data")
    return count, [parse_vgpu(entry) for entry in data]


def free_ips(payload: Any) -> list[str]:
    """A reader of `{"ip_addresses": [...]}` answers: the addresses, without a `/prefix`."""
    addresses = as_list(as_object(payload, "ip addresses").get("ip_addresses"), "ips")
    return [split_ip(str(address))[0] for address in addresses]
