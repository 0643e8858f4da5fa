"""Every call of the client against the simulator, over real HTTP: what comes back is what
the platform holds, and the platform's refusals come out as our errors."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from capvco_web.integrations.whitesky import (
    CapacityExhausted,
    Conflict,
    NotFound,
    WhiteskyClient,
)
from tests.integrations.whitesky.world import (
    CLOUDSPACE,
    IMAGE,
    LOCATION,
    NETWORK,
    card,
    new_vm,
    nic_attached,
    operations_called,
)
from tests.whitesky_sim import WhiteskySimulator


def test_current_user_belongs_to_the_customer(client: WhiteskyClient) -> None:
    user = client.current_user()
    assert client.customer_id in user.customer_ids
    assert user.username


def test_locations_and_customer_prices(client: WhiteskyClient) -> None:
    assert LOCATION in {location.name for location in client.list_locations()}
    (priced,) = client.list_customer_locations()
    assert priced.name == LOCATION
    assert priced.currency == "EUR"
    assert priced.prices["vgu"] == 600.0


def test_cloudspace_create_get_list_delete(client: WhiteskyClient) -> None:
    cloudspace_id = client.create_cloudspace(name="extra", location=LOCATION, private=False)
    got = client.get_cloudspace(cloudspace_id=cloudspace_id)
    assert (got.name, got.location) == ("extra", LOCATION)
    assert cloudspace_id in {cs.cloudspace_id for cs in client.list_cloudspaces()}

    client.delete_cloudspace(cloudspace_id=cloudspace_id, permanently=True)
    assert cloudspace_id not in {cs.cloudspace_id for cs in client.list_cloudspaces()}


def test_created_vm_is_halted_and_power_actions_change_its_status(
    client: WhiteskyClient,
) -> None:
    vm_id = new_vm(client)
    vm = client.get_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id)
    assert (vm.name, vm.status, vm.vcpus, vm.memory_mib, vm.image_id) == (
        "worker-1",
        "HALTED",
        2,
        4096,
        IMAGE,
    )
    assert vm.cloudspace_id == CLOUDSPACE

    client.start_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id)
    assert client.get_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id).status == "RUNNING"
    client.stop_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id, force=True)
    assert client.get_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id).status == "HALTED"


def test_vm_create_sends_start_and_user_data_as_query_parameters(
    client: WhiteskyClient, sim: WhiteskySimulator
) -> None:
    vm_id = client.create_vm(
        cloudspace_id=CLOUDSPACE,
        name="started",
        description="d",
        vcpus=1,
        memory_mib=2048,
        image_id=IMAGE,
        disk_size_gib=10,
        start=True,
        user_data="#cloud-config\n{}",
    )
    assert client.get_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id).status == "RUNNING"
    (call,) = operations_called(sim, "createVirtualMachine")
    assert "start_vm=true" in call["query"]
    assert "user_data=%23cloud-config" in call["query"]


def test_listed_vms_carry_the_cloudspace_id_they_were_listed_by(client: WhiteskyClient) -> None:
    vm_id = new_vm(client)
    (listed,) = [vm for vm in client.list_vms(cloudspace_id=CLOUDSPACE) if vm.vm_id == vm_id]
    assert listed.cloudspace_id == CLOUDSPACE
    assert listed.deletion_time is None


def test_deleted_vm_leaves_the_listing(client: WhiteskyClient) -> None:
    vm_id = new_vm(client)
    client.delete_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id, permanently=True)
    assert vm_id not in {vm.vm_id for vm in client.list_vms(cloudspace_id=CLOUDSPACE)}
    with pytest.raises(NotFound):
        client.get_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id)


def test_vm_in_recycle_bin_is_listed_only_with_include_deleted(client: WhiteskyClient) -> None:
    vm_id = new_vm(client)
    client.delete_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id)
    assert vm_id not in {vm.vm_id for vm in client.list_vms(cloudspace_id=CLOUDSPACE)}
    deleted = client.list_vms(cloudspace_id=CLOUDSPACE, include_deleted=True)
    assert vm_id in {vm.vm_id for vm in deleted}


def test_external_networks_images_and_free_ips(client: WhiteskyClient) -> None:
    (network,) = client.list_external_networks(location=LOCATION)
    assert network.external_network_id == NETWORK
    assert network.prefix_len == 24
    assert client.get_external_network(location=LOCATION, external_network_id=NETWORK) == network
    free = client.list_free_ips(location=LOCATION, external_network_id=NETWORK)
    assert free
    assert all("/" not in ip for ip in free)
    assert [image.image_id for image in client.list_images(location=LOCATION)] == [IMAGE]


def test_nic_attach_answers_the_new_nic_found_by_listing(client: WhiteskyClient) -> None:
    vm_id = new_vm(client)
    first = nic_attached(
        client, cloudspace_id=CLOUDSPACE, vm_id=vm_id, external_network_id=NETWORK, model="virtio"
    )
    second = nic_attached(
        client, cloudspace_id=CLOUDSPACE, vm_id=vm_id, external_network_id=NETWORK
    )
    assert first.mac != second.mac
    assert first.ip != second.ip
    assert (second.network_id, second.network_type, second.prefix_len) == (NETWORK, "external", 24)
    listed = client.list_vm_nics(cloudspace_id=CLOUDSPACE, vm_id=vm_id)
    assert {nic.mac for nic in listed} >= {first.mac, second.mac}
    assert client.get_vm_nic(cloudspace_id=CLOUDSPACE, vm_id=vm_id, ip=second.ip) == second
    free = client.list_free_ips(location=LOCATION, external_network_id=NETWORK)
    assert second.ip not in free


def test_nic_attach_with_a_chosen_address_gets_that_address(client: WhiteskyClient) -> None:
    vm_id = new_vm(client)
    wanted = client.list_free_ips(location=LOCATION, external_network_id=NETWORK)[-1]
    nic = nic_attached(
        client, cloudspace_id=CLOUDSPACE, vm_id=vm_id, external_network_id=NETWORK, ip=wanted
    )
    assert nic.ip == wanted


def test_nic_detach_by_ip_frees_the_address(client: WhiteskyClient) -> None:
    vm_id = new_vm(client)
    nic = nic_attached(client, cloudspace_id=CLOUDSPACE, vm_id=vm_id, external_network_id=NETWORK)
    client.detach_external_nic(
        cloudspace_id=CLOUDSPACE,
        vm_id=vm_id,
        ip=f"{nic.ip}/{nic.prefix_len}",  # as listed: the client drops the prefix
        external_network_id=NETWORK,
        network_type=nic.network_type,
    )
    assert nic.mac not in {
        n.mac for n in client.list_vm_nics(cloudspace_id=CLOUDSPACE, vm_id=vm_id)
    }
    assert nic.ip in client.list_free_ips(location=LOCATION, external_network_id=NETWORK)


def test_gpu_profiles_are_one_per_card_with_its_pci_address(client: WhiteskyClient) -> None:
    profiles = client.list_gpu_profiles(location=LOCATION)
    assert sorted(p.base_model for p in profiles) == ["A100", "A100", "T4"]
    assert all(p.pci_address for p in profiles)
    assert len({p.pci_address for p in profiles}) == 3
    assert {p.available_instances for p in profiles if p.base_model == "A100"} == {2}


def test_reserved_vgpu_is_listed_unassigned_under_its_name(client: WhiteskyClient) -> None:
    gpu_id = card(client, "A100")
    vgpu_id = client.reserve_vgpu(location=LOCATION, gpu_id=gpu_id, name="capvco-c-m-gpu-0")
    listing = client.list_vgpus(location=LOCATION)
    assert listing.complete
    (vgpu,) = listing.items
    assert (vgpu.vgpu_id, vgpu.name, vgpu.gpu_id) == (vgpu_id, "capvco-c-m-gpu-0", gpu_id)
    assert vgpu.vm_id is None
    assert not vgpu.assigned


def test_reserve_on_a_full_card_is_capacity_exhausted_naming_the_card(
    client: WhiteskyClient,
) -> None:
    gpu_id = card(client, "T4")
    client.reserve_vgpu(location=LOCATION, gpu_id=gpu_id, name="first")
    with pytest.raises(CapacityExhausted) as caught:
        client.reserve_vgpu(location=LOCATION, gpu_id=gpu_id, name="second")
    assert gpu_id in caught.value.message
    assert caught.value.status == 409
    assert caught.value.retryable


def test_reserve_and_attach_to_a_halted_vm_assigns_the_vgpu(client: WhiteskyClient) -> None:
    vm_id = new_vm(client)
    vgpu_id = client.reserve_and_attach_vgpu(
        cloudspace_id=CLOUDSPACE, vm_id=vm_id, gpu_id=card(client, "A100"), name="g0"
    )
    (vgpu,) = client.list_vgpus(location=LOCATION).items
    assert (vgpu.vgpu_id, vgpu.vm_id, vgpu.cloudspace_id) == (vgpu_id, vm_id, CLOUDSPACE)


def test_reserve_and_attach_to_a_running_vm_is_a_conflict_not_a_full_card(
    client: WhiteskyClient,
) -> None:
    vm_id = new_vm(client)
    client.start_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id)
    with pytest.raises(Conflict) as caught:
        client.reserve_and_attach_vgpu(
            cloudspace_id=CLOUDSPACE, vm_id=vm_id, gpu_id=card(client, "A100"), name="g0"
        )
    assert not isinstance(caught.value, CapacityExhausted)
    assert not caught.value.retryable


def test_attach_and_detach_move_a_reservation_between_vm_and_account(
    client: WhiteskyClient,
) -> None:
    vm_id = new_vm(client)
    vgpu_id = client.reserve_vgpu(location=LOCATION, gpu_id=card(client, "A100"), name="g0")
    client.attach_vgpu(cloudspace_id=CLOUDSPACE, vm_id=vm_id, vgpu_id=vgpu_id)
    assert client.list_vgpus(location=LOCATION).items[0].vm_id == vm_id
    client.detach_vgpu(cloudspace_id=CLOUDSPACE, vm_id=vm_id, vgpu_id=vgpu_id)
    (vgpu,) = client.list_vgpus(location=LOCATION).items
    assert vgpu.vm_id is None  # still reserved, still billed


def test_permanent_release_removes_the_reservation_and_frees_the_card(
    client: WhiteskyClient,
) -> None:
    gpu_id = card(client, "T4")
    vgpu_id = client.reserve_vgpu(location=LOCATION, gpu_id=gpu_id, name="g0")
    client.release_vgpu(location=LOCATION, vgpu_id=vgpu_id)
    assert client.list_vgpus(location=LOCATION).items == ()
    (t4,) = [p for p in client.list_gpu_profiles(location=LOCATION) if p.id == gpu_id]
    assert t4.available_instances == 1


def test_release_of_an_attached_vgpu_detaches_it_first(client: WhiteskyClient) -> None:
    vm_id = new_vm(client)
    vgpu_id = client.reserve_and_attach_vgpu(
        cloudspace_id=CLOUDSPACE, vm_id=vm_id, gpu_id=card(client, "A100"), name="g0"
    )
    client.release_vgpu(location=LOCATION, vgpu_id=vgpu_id, detach=True, permanently=True)
    assert client.list_vgpus(location=LOCATION).items == ()
    assert client.get_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id).devices == ()


def test_soft_released_vgpu_can_be_restored(client: WhiteskyClient) -> None:
    vgpu_id = client.reserve_vgpu(location=LOCATION, gpu_id=card(client, "A100"), name="g0")
    client.release_vgpu(location=LOCATION, vgpu_id=vgpu_id, permanently=False)
    assert client.list_vgpus(location=LOCATION).items == ()
    deleted = client.list_vgpus(location=LOCATION, include_deleted=True).items
    assert [v.vgpu_id for v in deleted] == [vgpu_id]
    assert deleted[0].deletion_time is not None

    client.restore_vgpu(location=LOCATION, vgpu_id=vgpu_id)
    (restored,) = client.list_vgpus(location=LOCATION).items
    assert restored.vgpu_id == vgpu_id
    assert restored.deletion_time is None


def test_consumption_bills_an_unassigned_reservation(
    client: WhiteskyClient, sim: WhiteskySimulator
) -> None:
    start = int(time.time())
    vgpu_id = client.reserve_vgpu(location=LOCATION, gpu_id=card(client, "A100"), name="g0")
    now = sim.advance(2 * 3600)
    consumption = client.location_consumption(location=LOCATION, start=start, end=int(now))
    assert consumption.unassigned_vgpus[vgpu_id] == pytest.approx(2.0, rel=0.01)
    assert consumption.totals["vgu"] == pytest.approx(2.0, rel=0.01)


def test_listing_collects_every_page(
    make_client: Callable[..., WhiteskyClient], sim: WhiteskySimulator, client: WhiteskyClient
) -> None:
    cards = [
        p.id
        for p in client.list_gpu_profiles(location=LOCATION)
        for _ in range(p.available_instances)
    ]
    names = [f"g{n}" for n in range(len(cards))]
    for gpu_id, name in zip(cards, names, strict=True):
        client.reserve_vgpu(location=LOCATION, gpu_id=gpu_id, name=name)
    small_pages = make_client(page_size=2)
    sim.clear_calls()
    listing = small_pages.list_vgpus(location=LOCATION)
    assert listing.complete
    assert sorted(v.name for v in listing.items) == names  # five, on three pages
    assert len(operations_called(sim, "listCustomerVGPUS")) == 3
