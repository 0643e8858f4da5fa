"""Reading the API's JSON into our types: the normalisations the description forces on us."""

from __future__ import annotations

import pytest

from capvco_web.integrations.whitesky import UnexpectedResponse
from capvco_web.integrations.whitesky.payloads import (
    parse_consumption,
    parse_customer_locations,
    parse_external_network,
    parse_gpu_profile,
    parse_vgpu,
    parse_vm,
    parse_vm_nic,
    split_ip,
)

VGPU = {
    "account_id": 1,
    "customer_id": "cust-1",
    "customer_name": "C",
    "vgpu_id": "vg-1",
    "vgpu_name": "capvco-c1-m1-gpu-0",
    "gpu_id": "gpu-a",
    "description": "",
    "status": "ASSIGNED",
    "deletion_time": 0,
    "location": "loc-1",
    "virtual_machine": {"id": 42, "name": "m1", "cloudspace_id": "cs-1", "cloudspace_name": "cs"},
}


def test_gpu_profile_takes_the_pci_address_from_the_model_suffix() -> None:
    profile = parse_gpu_profile(
        {
            "id": "p1",
            "vendor": "NVIDIA",
            "model": "Dummy GPU 0000:F1:e1.0",
            "description": "",
            "available_instances": 3,
        }
    )
    assert profile.pci_address == "0000:f1:e1.0"
    assert profile.base_model == "Dummy GPU"
    assert profile.available_instances == 3


def test_gpu_profile_without_pci_suffix_has_no_address() -> None:
    profile = parse_gpu_profile(
        {
            "id": "p1",
            "vendor": "NVIDIA",
            "model": "A100",
            "description": "",
            "available_instances": 0,
        }
    )
    assert profile.pci_address is None
    assert profile.base_model == "A100"


def test_gpu_profile_without_id_is_refused() -> None:
    with pytest.raises(UnexpectedResponse):
        parse_gpu_profile({"vendor": "NVIDIA", "model": "A100", "available_instances": 1})


def test_vgpu_reads_its_vm_and_treats_zero_deletion_time_as_none() -> None:
    vgpu = parse_vgpu(VGPU)
    assert (vgpu.vgpu_id, vgpu.name, vgpu.gpu_id) == ("vg-1", "capvco-c1-m1-gpu-0", "gpu-a")
    assert (vgpu.vm_id, vgpu.vm_name, vgpu.cloudspace_id) == (42, "m1", "cs-1")
    assert vgpu.assigned
    assert vgpu.deletion_time is None


@pytest.mark.parametrize(
    "machine",
    [None, {}, {"id": 0, "name": "", "cloudspace_id": "", "cloudspace_name": ""}],
    ids=["null", "empty", "zeroed"],
)
def test_unassigned_vgpu_has_no_vm_whatever_shape_the_empty_vm_takes(machine: object) -> None:
    vgpu = parse_vgpu({**VGPU, "virtual_machine": machine})
    assert vgpu.vm_id is None
    assert vgpu.cloudspace_id is None
    assert not vgpu.assigned


def test_vgpu_without_id_is_refused_because_it_could_never_be_released() -> None:
    with pytest.raises(UnexpectedResponse):
        parse_vgpu({k: v for k, v in VGPU.items() if k != "vgpu_id"})


def test_vm_cloudspace_id_is_a_string_whether_listed_as_int_or_str() -> None:
    base = {"vm_id": 7, "name": "m", "status": "HALTED", "vcpus": 2, "memory": 4096}
    assert parse_vm({**base, "cloudspace_id": 12}).cloudspace_id == "12"
    assert parse_vm({**base, "cloudspace_id": "12"}).cloudspace_id == "12"
    assert parse_vm(base).cloudspace_id is None


def test_vm_reads_nics_from_either_the_list_or_the_get_shape() -> None:
    listed = parse_vm(
        {
            "vm_id": 7,
            "network_interfaces": [
                {
                    "device_name": "eth1",
                    "mac_address": "52:54:00:AA:BB:CC",
                    "ip_address": "10.50.0.12/24",
                    "network_id": 101,
                    "model": "virtio",
                    "external_network_type": "external",
                }
            ],
            "devices": [{"reference_id": "vg-1", "type": "VGPU", "description": "A100"}],
        }
    )
    (nic,) = listed.nics
    assert (nic.mac, nic.ip, nic.prefix_len, nic.network_id) == (
        "52:54:00:aa:bb:cc",
        "10.50.0.12",
        24,
        101,
    )
    assert nic.network_type == "external"
    assert listed.devices[0].reference_id == "vg-1"


def test_nic_ip_loses_its_prefix_and_type_comes_from_nic_type() -> None:
    nic = parse_vm_nic(
        {
            "device_name": "eth2",
            "mac_address": "52:54:00:00:00:01",
            "ip_address": "10.0.0.5",
            "network_id": -1,
            "nic_type": "CLOUDSPACE",
            "model": "virtio",
            "external_cloudspace_id": "cs-2",
        }
    )
    assert (nic.ip, nic.prefix_len) == ("10.0.0.5", None)
    assert nic.network_type == "cloudspace"


def test_split_ip() -> None:
    assert split_ip("10.1.2.3/16") == ("10.1.2.3", 16)
    assert split_ip(" 10.1.2.3 ") == ("10.1.2.3", None)


@pytest.mark.parametrize(
    ("mask", "network", "prefix"),
    [("255.255.255.0", "10.0.0.0", 24), ("", "10.0.0.0/22", 22), ("/25", "", 25), ("", "", None)],
)
def test_external_network_prefix_from_mask_or_cidr(mask: str, network: str, prefix: int) -> None:
    net = parse_external_network(
        {"external_network_id": "101", "subnet_mask": mask, "network": network}
    )
    assert net.external_network_id == 101
    assert net.prefix_len == prefix


def test_customer_locations_carry_prices_per_unit_and_the_currency() -> None:
    (location,) = parse_customer_locations(
        {
            "currency": "EUR",
            "locations": [{"location": "l1", "resources": {"vgu": 600, "su": 30.5}}],
        }
    )
    assert location.name == "l1"
    assert location.currency == "EUR"
    assert location.prices == {"vgu": 600.0, "su": 30.5}


def test_consumption_maps_unassigned_vgpus_to_their_vgu() -> None:
    consumption = parse_consumption(
        {
            "name": "acct",
            "consumption": {"vgu": 3.0, "vcu": 10},
            "cloudspaces": [
                {
                    "cloudspace_id": "cs-1",
                    "name": "cs",
                    "consumption": {"vcu": 10},
                    "vms": [{"vm_id": 7, "name": "m", "consumption": {"vgu": 1.0}}],
                }
            ],
            "unassigned_vgpus": [{"vgpu_id": "vg-9", "consumption": {"vgu": 2.0}}],
            "unassigned_disks": [{"disk_id": 3, "consumption": {"su": 0.1}}],
        }
    )
    assert consumption.unassigned_vgpus == {"vg-9": 2.0}
    assert consumption.totals == {"vgu": 3.0, "vcu": 10.0}
    assert consumption.cloudspaces[0].vms[7] == {"vgu": 1.0}
    assert consumption.unassigned_disks == {3: {"su": 0.1}}


@pytest.mark.parametrize("value", ["0", 0, "", None])
def test_listed_vm_with_a_zero_deletion_time_is_not_deleted(value: object) -> None:
    assert parse_vm({"vm_id": 1, "deletion_time": value}).deletion_time is None
