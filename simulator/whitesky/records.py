"""The simulated platform's records: plain dataclasses, related by id like rows in tables.

Nothing here knows HTTP or the API's field names; ``api`` shapes the answers. Records are
kept after they are destroyed (``destroyed``) so that billing over past windows still sees
them; the API never shows destroyed records.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# Statuses. VM: HALTED after create with start_vm=false, RUNNING, DELETED (recycle bin).
# vGPU: RESERVED (no VM), ASSIGNED, DELETED (restorable). DESTROYED is internal: gone.
VM_RUNNING = "RUNNING"
VM_HALTED = "HALTED"
DELETED = "DELETED"
DESTROYED = "DESTROYED"
VGPU_RESERVED = "RESERVED"
VGPU_ASSIGNED = "ASSIGNED"
CLOUDSPACE_DEPLOYED = "DEPLOYED"


@dataclass
class Customer:
    customer_id: str
    name: str
    address: str
    phone_number: str
    status: str = "ACTIVE"


@dataclass
class User:
    username: str
    firstname: str
    lastname: str
    email: str


@dataclass
class Location:
    name: str
    account_id: int  # the customer's account in this location (VGPUInfo.account_id)
    prices: dict[str, float]  # monthly price per unit: su, ou, mu, vcu, tu, wu, nu, piu, vgu, fsu
    datacenter: dict[str, Any]


@dataclass
class GpuCard:
    """One physical card, which the platform shows as one GPU profile."""

    gpu_id: str
    location: str
    vendor: str
    model: str  # "A100"; the profile's model string adds the PCI address
    pci_address: str
    description: str
    instances_per_card: int
    held: int = 0  # instances held by vGPUs (reserved, assigned, or deleted but restorable)

    @property
    def profile_model(self) -> str:
        return f"{self.model} {self.pci_address}"

    @property
    def available_instances(self) -> int:
        return self.instances_per_card - self.held


@dataclass
class Segment:
    """A stretch of time a vGPU was billed, on a VM (vm_id) or unassigned (None)."""

    start: float
    end: float | None = None
    vm_id: int | None = None


@dataclass
class Vgpu:
    vgpu_id: str
    vgpu_name: str
    gpu_id: str
    location: str
    status: str
    created_at: float
    vm_id: int | None = None
    holds_instance: bool = True
    deletion_time: int = 0
    segments: list[Segment] = field(default_factory=list)

    @property
    def destroyed(self) -> bool:
        return self.status == DESTROYED

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Vgpu:
        segments = [Segment(**segment) for segment in data.get("segments", [])]
        return cls(**{**data, "segments": segments})


@dataclass
class Image:
    image_id: int
    location: str
    name: str
    os_type: str = "Linux"
    description: str = ""
    boot_disk_size: int = 10  # GiB
    size: int = 3  # GiB
    memory: int = 512  # MiB, the minimum the image needs
    status: str = "CREATED"


@dataclass
class ExternalNetwork:
    external_network_id: int
    location: str
    name: str
    cidr: str  # "10.50.0.0/24"
    gateway: str
    pool_start: str  # first address handed out
    pool_end: str  # last address handed out
    dhcp: bool = False
    public: bool = False
    allocated: dict[str, str] = field(default_factory=dict)  # address -> holder, for the dump


@dataclass
class Cloudspace:
    cloudspace_id: str
    numeric_id: int  # the platform-internal integer id, which the VM list shows
    name: str
    location: str
    status: str
    private_network: str
    external_network_id: int | None
    external_network_ip: str
    local_domain: str
    creation_time: int
    update_time: int
    next_private_host: int = 10  # private addresses are handed out upwards from .10
    deletion_time: int = 0
    destroyed: bool = False
    vm_ids: list[int] = field(default_factory=list)


@dataclass
class Nic:
    """An external NIC; its address is stored without the /prefix suffix."""

    mac_address: str
    vm_id: int
    device_name: str
    ip_address: str
    prefix_length: int
    network_id: int
    model: str
    nic_type: str = "EXTERNAL"
    external_cloudspace_id: str = ""


@dataclass
class Vm:
    vm_id: int
    cloudspace_id: str
    name: str
    description: str
    hostname: str
    vcpus: int
    memory: int  # MiB
    image_id: int
    disk_size: int  # GiB, boot disk
    boot_disk_id: int
    status: str
    creation_time: float
    update_time: float
    private_ip: str
    private_mac: str
    user_data: str = ""
    deletion_time: float = 0.0
    destroyed_time: float | None = None
    nic_macs: list[str] = field(default_factory=list)
    vgpu_ids: list[str] = field(default_factory=list)

    @property
    def destroyed(self) -> bool:
        return self.status == DESTROYED


@dataclass
class Tables:
    """The whole world, as the state file and GET /_sim/state hold it."""

    customer: Customer
    user: User
    currency: str
    locations: dict[str, Location]
    cards: dict[str, GpuCard]
    images: dict[int, Image]
    networks: dict[int, ExternalNetwork]
    cloudspaces: dict[str, Cloudspace]
    vms: dict[int, Vm] = field(default_factory=dict)
    nics: dict[str, Nic] = field(default_factory=dict)
    vgpus: dict[str, Vgpu] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        def rows(table: dict[Any, Any]) -> list[dict[str, Any]]:
            return [dataclasses.asdict(record) for record in table.values()]

        return {
            "customer": dataclasses.asdict(self.customer),
            "user": dataclasses.asdict(self.user),
            "currency": self.currency,
            "locations": rows(self.locations),
            "cards": rows(self.cards),
            "images": rows(self.images),
            "networks": rows(self.networks),
            "cloudspaces": rows(self.cloudspaces),
            "vms": rows(self.vms),
            "nics": rows(self.nics),
            "vgpus": rows(self.vgpus),
            "counters": dict(self.counters),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tables:
        return cls(
            customer=Customer(**data["customer"]),
            user=User(**data["user"]),
            currency=data["currency"],
            locations={row["name"]: Location(**row) for row in data["locations"]},
            cards={row["gpu_id"]: GpuCard(**row) for row in data["cards"]},
            images={row["image_id"]: Image(**row) for row in data["images"]},
            networks={
                row["external_network_id"]: ExternalNetwork(**row) for row in data["networks"]
            },
            cloudspaces={row["cloudspace_id"]: Cloudspace(**row) for row in data["cloudspaces"]},
            vms={row["vm_id"]: Vm(**row) for row in data["vms"]},
            nics={row["mac_address"]: Nic(**row) for row in data["nics"]},
            vgpus={row["vgpu_id"]: Vgpu.from_dict(row) for row in data["vgpus"]},
            counters=dict(data["counters"]),
        )
