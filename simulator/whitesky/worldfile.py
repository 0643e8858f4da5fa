"""Build a ``World`` from a world file (format: docs/simulator-contract.md).

Identifiers the world file does not give are derived deterministically, so the same world
always yields the same GPU profile ids, PCI addresses, MACs and VM ids.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

from simulator.whitesky.records import (
    Customer,
    ExternalNetwork,
    GpuCard,
    Image,
    Location,
    Tables,
    User,
)
from simulator.whitesky.state import Clock, World

DEMO_WORLD = Path(__file__).resolve().parent / "worlds" / "demo.json"

PRICE_UNITS = ("su", "ou", "mu", "vcu", "tu", "wu", "nu", "piu", "vgu", "fsu")

# PCI buses on which servers typically seat their GPUs; a location's cards take them in
# order, and cards beyond the sixth move to the next PCI domain.
_GPU_PCI_BUSES = (0x17, 0x3B, 0x5E, 0x86, 0xAF, 0xD8)


class WorldError(ValueError):
    """The world file is not usable; the message says where."""


def load_world_file(path: Path) -> dict[str, Any]:
    try:
        spec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise WorldError(f"cannot read world file {path}: {exc}") from exc
    if not isinstance(spec, dict):
        raise WorldError(f"world file {path} must hold a JSON object")
    return spec


def build_world(spec: dict[str, Any], clock: Clock, switches: dict[str, bool]) -> World:
    try:
        return _build(spec, clock, switches)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, WorldError):
            raise
        raise WorldError(f"invalid world: {type(exc).__name__}: {exc}") from exc


def _build(spec: dict[str, Any], clock: Clock, switches: dict[str, bool]) -> World:
    customer_spec = spec["customer"]
    customer = Customer(
        customer_id=str(customer_spec["customer_id"]),
        name=str(customer_spec.get("name", customer_spec["customer_id"])),
        address=str(customer_spec.get("address", "Simulated Street 1, Rotterdam")),
        phone_number=str(customer_spec.get("phone_number", "+31 10 000 0000")),
    )
    user_spec = spec.get("user", {})
    user = User(
        username=str(user_spec.get("username", "sim-user")),
        firstname=str(user_spec.get("firstname", "Sim")),
        lastname=str(user_spec.get("lastname", "User")),
        email=str(user_spec.get("email", "sim-user@example.com")),
    )
    tables = Tables(
        customer=customer,
        user=user,
        currency=str(spec.get("currency", "EUR")),
        locations={},
        cards={},
        images={},
        networks={},
        cloudspaces={},
    )
    location_specs = spec["locations"]
    if not isinstance(location_specs, list) or not location_specs:
        raise WorldError("a world needs at least one location")
    for index, location_spec in enumerate(location_specs):
        _add_location(tables, index, location_spec)

    world = World(tables, clock=clock, switches=switches)
    for location_spec in location_specs:
        for cloudspace_spec in location_spec.get("cloudspaces", []):
            world.create_cloudspace(
                customer.customer_id,
                name=str(cloudspace_spec["name"]),
                location=str(location_spec["name"]),
                private_network=str(cloudspace_spec.get("private_network", "192.168.103.0/24")),
                external_network_id=cloudspace_spec.get("external_network_id"),
                cloudspace_id=str(cloudspace_spec["cloudspace_id"]),
            )
    return world


def _add_location(tables: Tables, index: int, spec: dict[str, Any]) -> None:
    name = str(spec["name"])
    if name in tables.locations:
        raise WorldError(f"location {name} appears twice")
    prices = {unit: 0.0 for unit in PRICE_UNITS}
    for unit, price in spec.get("prices", {}).items():
        if unit not in prices:
            raise WorldError(f"location {name}: unknown price unit {unit!r}")
        prices[unit] = float(price)
    datacenter = {"name": name, "code": name, "city": "", "country": "", "country_code": ""}
    datacenter.update(spec.get("datacenter", {}))
    tables.locations[name] = Location(
        name=name,
        account_id=int(spec.get("account_id", 100 + index)),
        prices=prices,
        datacenter=datacenter,
    )

    card_index = 0
    for group in spec.get("gpu_cards", []):
        addresses = group.get("pci_addresses") or []
        for n in range(int(group["cards"])):
            pci = addresses[n] if n < len(addresses) else _pci_address(card_index)
            gpu_id = f"{name}-{pci.replace(':', '-').replace('.', '-')}"
            if gpu_id in tables.cards:
                raise WorldError(f"location {name}: PCI address {pci} used twice")
            vendor = str(group.get("vendor", "NVIDIA"))
            model = str(group["model"])
            instances = int(group["instances_per_card"])
            if instances < 1:
                raise WorldError(f"location {name}: instances_per_card must be at least 1")
            tables.cards[gpu_id] = GpuCard(
                gpu_id=gpu_id,
                location=name,
                vendor=vendor,
                model=model,
                pci_address=pci,
                description=str(
                    group.get("description", f"{vendor} {model}, {instances} vGPU instances")
                ),
                instances_per_card=instances,
            )
            card_index += 1

    for network_spec in spec.get("external_networks", []):
        network_id = int(network_spec["external_network_id"])
        if network_id in tables.networks:
            raise WorldError(f"external network {network_id} appears twice")
        network = ipaddress.IPv4Network(str(network_spec["cidr"]), strict=True)
        gateway = ipaddress.IPv4Address(str(network_spec.get("gateway", network[1])))
        pool_start = ipaddress.IPv4Address(str(network_spec.get("pool_start", network[10])))
        pool_end = ipaddress.IPv4Address(str(network_spec.get("pool_end", network[-2])))
        for label, address in (
            ("gateway", gateway),
            ("pool_start", pool_start),
            ("pool_end", pool_end),
        ):
            if address not in network:
                raise WorldError(
                    f"external network {network_id}: {label} {address} not in {network}"
                )
        tables.networks[network_id] = ExternalNetwork(
            external_network_id=network_id,
            location=name,
            name=str(network_spec.get("name", f"external-{network_id}")),
            cidr=str(network),
            gateway=str(gateway),
            pool_start=str(pool_start),
            pool_end=str(pool_end),
            dhcp=bool(network_spec.get("dhcp", False)),
            public=bool(network_spec.get("public", False)),
        )

    for image_spec in spec.get("images", []):
        image_id = int(image_spec["image_id"])
        if image_id in tables.images:
            raise WorldError(f"image {image_id} appears twice")
        fields = {k: v for k, v in image_spec.items() if k not in ("image_id", "location")}
        tables.images[image_id] = Image(image_id=image_id, location=name, **fields)


def _pci_address(card_index: int) -> str:
    domain, slot = divmod(card_index, len(_GPU_PCI_BUSES))
    return f"{domain:04x}:{_GPU_PCI_BUSES[slot]:02x}:00.0"
