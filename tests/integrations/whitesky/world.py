"""The world the client tests run against, and small steps on it that many tests take."""

from __future__ import annotations

from typing import Any

from capvco_web.integrations.whitesky import VmNic, WhiteskyClient, new_nic
from tests.whitesky_sim import WhiteskySimulator

LOCATION = "loc-test"
CLOUDSPACE = "cs-test"
NETWORK = 101
IMAGE = 11

# A small world of our own, so that the tests do not depend on the demo world's contents.
WORLD: dict[str, Any] = {
    "customer": {"customer_id": "cust-test", "name": "Test Customer"},
    "currency": "EUR",
    "locations": [
        {
            "name": LOCATION,
            "prices": {"vgu": 600.0, "vcu": 12.0, "mu": 4.0, "su": 30.0, "piu": 5.0},
            "gpu_cards": [
                {"vendor": "NVIDIA", "model": "A100", "cards": 2, "instances_per_card": 2},
                {"vendor": "NVIDIA", "model": "T4", "cards": 1, "instances_per_card": 1},
            ],
            "external_networks": [
                {
                    "external_network_id": NETWORK,
                    "name": "sriov-test",
                    "cidr": "10.50.0.0/24",
                    "gateway": "10.50.0.1",
                }
            ],
            "images": [{"image_id": IMAGE, "name": "Ubuntu 24.04"}],
            "cloudspaces": [{"cloudspace_id": CLOUDSPACE, "name": "k8s"}],
        }
    ],
}


def operations_called(sim: WhiteskySimulator, operation: str) -> list[dict[str, Any]]:
    return [call for call in sim.calls()["calls"] if call["operation"] == operation]


def new_vm(client: WhiteskyClient, name: str = "worker-1") -> int:
    return client.create_vm(
        cloudspace_id=CLOUDSPACE,
        name=name,
        description="test",
        vcpus=2,
        memory_mib=4096,
        image_id=IMAGE,
        disk_size_gib=20,
    )


def card(client: WhiteskyClient, model: str) -> str:
    return next(p.id for p in client.list_gpu_profiles(location=LOCATION) if p.base_model == model)


def nic_attached(
    client: WhiteskyClient,
    *,
    cloudspace_id: str,
    vm_id: int,
    external_network_id: int,
    ip: str | None = None,
    model: str | None = None,
) -> VmNic:
    """Attach a NIC as the SR-IOV agent does (the listing before, the attach, the listing
    after: the new NIC is the one `new_nic` finds) and answer it."""
    before = {nic.mac for nic in client.list_vm_nics(cloudspace_id=cloudspace_id, vm_id=vm_id)}
    client.send_external_nic_attach(
        cloudspace_id=cloudspace_id,
        vm_id=vm_id,
        external_network_id=external_network_id,
        ip=ip,
        model=model,
    )
    after = client.list_vm_nics(cloudspace_id=cloudspace_id, vm_id=vm_id)
    found = new_nic(after, before=before, ip=ip)
    assert found is not None, "the attach made no NIC"
    return found
