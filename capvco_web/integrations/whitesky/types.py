"""What the whitesky API answers, as frozen dataclasses (read from JSON by `payloads.py`)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .errors import WhiteskyError

T = TypeVar("T")

# A PCI address at the end of a GPU profile's model string: "Dummy GPU 0000:f1:e1.0".
PCI_SUFFIX = re.compile(r"\s*\(?((?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\)?\s*$")


def _prefix_from(text: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if "/" in text:
        tail = text.rsplit("/", 1)[1]
        return int(tail) if tail.isdigit() else None
    try:
        return ipaddress.IPv4Network(f"0.0.0.0/{text}").prefixlen
    except ValueError:
        return None


@dataclass(frozen=True)
class Listing(Generic[T]):
    """A listing that says whether it is whole.

    `complete` is False when a page failed (the error is in `error`) or the pages did not add
    up; `items` then holds what was read, and no decision that assumes "absent means gone"
    may be taken from it.
    """

    items: tuple[T, ...]
    complete: bool
    error: WhiteskyError | None = None


@dataclass(frozen=True)
class CurrentUser:
    username: str
    email: str
    iam_domain: str
    customer_ids: tuple[str, ...]
    admin_of_customer_ids: tuple[str, ...]


@dataclass(frozen=True)
class Location:
    name: str
    datacenter_name: str
    city: str
    country_code: str


@dataclass(frozen=True)
class CustomerLocation:
    """A location the customer may use, with its monthly price per resource unit."""

    name: str
    currency: str
    prices: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Cloudspace:
    cloudspace_id: str
    name: str
    location: str
    status: str
    private_network: str
    external_network_ip: str


@dataclass(frozen=True)
class VmNic:
    """A VM's NIC. `ip` never carries the `/prefix` the API may append; that is `prefix_len`."""

    mac: str
    ip: str
    prefix_len: int | None
    network_id: int | None
    nic_type: str
    model: str
    device_name: str
    external_cloudspace_id: str = ""

    @property
    def network_type(self) -> str:
        """`external` or `cloudspace`, as the detach call wants it."""
        lowered = self.nic_type.lower()
        if lowered in {"external", "cloudspace"}:
            return lowered
        return "cloudspace" if self.network_id == -1 else "external"


@dataclass(frozen=True)
class VmDevice:
    reference_id: str
    type: str
    description: str


@dataclass(frozen=True)
class Vm:
    vm_id: int
    name: str
    status: str
    cloudspace_id: str | None
    """Always the string id. The VM *list* types it as an integer that need not be the
    cloudspace's id, so `list_vms` fills in the id it listed."""
    vcpus: int
    memory_mib: int
    image_id: int | None
    description: str
    hostname: str
    nics: tuple[VmNic, ...]
    devices: tuple[VmDevice, ...]
    deletion_time: str | None = None


@dataclass(frozen=True)
class ExternalNetwork:
    external_network_id: int
    name: str
    network: str
    gateway: str
    subnet_mask: str
    dhcp: bool
    public: bool

    @property
    def prefix_len(self) -> int | None:
        """From `subnet_mask` (dotted or `/n`), else from a CIDR `network`."""
        for candidate in (self.subnet_mask, self.network):
            prefix = _prefix_from(candidate)
            if prefix is not None:
                return prefix
        return None


@dataclass(frozen=True)
class Image:
    image_id: int
    name: str
    status: str
    os_type: str
    description: str
    boot_disk_size: int | None


@dataclass(frozen=True)
class GpuProfile:
    """One physical card's vGPU profile at a location (a GPU type spans several)."""

    id: str
    vendor: str
    model: str
    pci_address: str | None
    description: str
    available_instances: int

    @property
    def base_model(self) -> str:
        """The model without the card's PCI address: what makes profiles one GPU type."""
        return PCI_SUFFIX.sub("", self.model).strip()


@dataclass(frozen=True)
class Vgpu:
    """A vGPU reservation. Billed from reservation on, attached (`vm_id`) or not."""

    vgpu_id: str
    name: str
    gpu_id: str
    status: str
    location: str
    description: str
    vm_id: int | None
    vm_name: str | None
    cloudspace_id: str | None
    deletion_time: int | None

    @property
    def assigned(self) -> bool:
        return self.vm_id is not None


@dataclass(frozen=True)
class CloudspaceConsumption:
    cloudspace_id: str
    name: str
    totals: Mapping[str, float]
    vms: Mapping[int, Mapping[str, float]]
    vm_names: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Consumption:
    """Billing units consumed at a location between `start` and `end` (unix seconds).

    `unassigned_vgpus` maps a vGPU id to its `vgu` consumption: reservations billed while no VM
    holds them.
    """

    name: str
    totals: Mapping[str, float]
    unassigned_vgpus: Mapping[str, float]
    unassigned_disks: Mapping[int, Mapping[str, float]]
    cloudspaces: tuple[CloudspaceConsumption, ...]
