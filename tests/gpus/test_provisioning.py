"""Provisioning GPU machines by type, against the simulator over real HTTP."""

from __future__ import annotations

from cloud.whitesky import whitesky_client
from clusters.models import Machine
from gpus.models import GpuProfile, VgpuReservation
from tests.gpus.conftest import BE, NL, Plane


def sim_vm(plane: Plane, vm_id: int | None) -> dict[str, object]:
    return next(vm for vm in plane.sim.state()["vms"] if vm["vm_id"] == vm_id)


def test_one_gpu_machine_gets_its_named_vgpu_attached_before_first_boot(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)

    plane.converge(cluster)

    machine = Machine.objects.get(name="a100-0")
    assert machine.phase == Machine.Phase.RUNNING, machine.failure_message
    [vgpu] = plane.sim_vgpus()
    assert vgpu["vgpu_name"] == "capvco-demo-a100-0-gpu-0"
    assert vgpu["vm_id"] == machine.vm_id
    assert sim_vm(plane, machine.vm_id)["status"] == "RUNNING"
    row = VgpuReservation.objects.get(name="capvco-demo-a100-0-gpu-0")
    assert (row.vgpu_id, row.state, row.machine_id) == (
        vgpu["vgpu_id"],
        VgpuReservation.State.ATTACHED,
        machine.pk,
    )


def test_two_gpus_of_a_machine_share_one_card(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="nvidia a100", gpu_count=2, replicas=2)

    plane.converge(cluster)

    vgpus = plane.sim_vgpus()
    assert sorted(v["vgpu_name"] for v in vgpus) == [
        "capvco-demo-a100-0-gpu-0",
        "capvco-demo-a100-0-gpu-1",
        "capvco-demo-a100-1-gpu-0",
        "capvco-demo-a100-1-gpu-1",
    ]
    cards = {
        m: {v["gpu_id"] for v in vgpus if f"-{m}-gpu" in v["vgpu_name"]}
        for m in ("a100-0", "a100-1")
    }
    assert all(len(ids) == 1 for ids in cards.values())
    # The emptiest card wins: the second machine did not squeeze onto the first one's card.
    assert cards["a100-0"] != cards["a100-1"]


def test_each_location_resolves_the_type_to_its_own_cards(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "gpu-nl", location=NL, gpu_type="NVIDIA A100", gpu_count=1)
    plane.pool(cluster, "gpu-be", location=BE, gpu_type="NVIDIA A100", gpu_count=1)

    plane.converge(cluster)

    by_name = {v["vgpu_name"]: v for v in plane.sim_vgpus()}
    nl_cards = set(
        GpuProfile.objects.filter(location__name=NL).values_list("profile_id", flat=True)
    )
    be_cards = set(
        GpuProfile.objects.filter(location__name=BE).values_list("profile_id", flat=True)
    )
    assert by_name["capvco-demo-gpu-nl-0-gpu-0"]["gpu_id"] in nl_cards
    assert by_name["capvco-demo-gpu-be-0-gpu-0"]["gpu_id"] in be_cards
    assert by_name["capvco-demo-gpu-be-0-gpu-0"]["location"] == BE


def test_profile_id_picks_exactly_that_card(plane: Plane) -> None:
    plane.observe()
    card = (
        GpuProfile.objects.filter(location__name=NL, model__startswith="L40S")
        .order_by("profile_id")
        .last()
    )
    assert card is not None
    cluster = plane.cluster()
    plane.pool(cluster, "pinned", gpu_profile_id=card.profile_id, gpu_count=2)

    plane.converge(cluster)

    assert {v["gpu_id"] for v in plane.sim_vgpus()} == {card.profile_id}


def test_unknown_type_fails_loudly_listing_what_the_location_offers(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "h100", gpu_type="NVIDIA H100", gpu_count=1)

    plane.converge(cluster, passes=2)

    machine = Machine.objects.get(name="h100-0")
    assert machine.phase == Machine.Phase.FAILED
    assert "nl-rmd-dc01-001 has no GPU type 'NVIDIA H100'" in machine.failure_message
    assert "NVIDIA A100: 16 free on 4 card(s)" in machine.failure_message
    assert "NVIDIA L40S: 8 free on 2 card(s)" in machine.failure_message
    assert machine.vm_id is None  # no VM is made for a machine that cannot get its GPU
    assert plane.sim_vgpus() == []


def test_exhausted_type_waits_then_succeeds_once_capacity_returns(plane: Plane) -> None:
    cluster = plane.cluster()
    # 2 L40S cards of 4 instances: two 4-GPU machines fill them, a third finds no room.
    pool = plane.pool(cluster, "l40s", gpu_type="NVIDIA L40S", gpu_count=4, replicas=3)

    plane.converge(cluster, passes=3)

    waiting = Machine.objects.get(name="l40s-2")
    assert waiting.phase == Machine.Phase.PENDING  # waiting, not failed
    assert waiting.waiting_for_capacity
    assert waiting.failure_message == (
        f"waiting for capacity: 0 free of NVIDIA L40S at {NL}, at most 0 on one card; "
        "a machine needs 4 on one card"
    )
    assert waiting.failures == 1 and waiting.next_try_at is not None  # the same backoff
    assert waiting.vm_id is None and len(plane.sim_vgpus()) == 8

    # Capacity returns: the pool shrinks to one machine... and grows back to two.
    pool.replicas = 1
    pool.save()
    plane.converge(cluster)
    pool.replicas = 2
    pool.save()
    plane.converge(cluster)

    assert sorted(Machine.objects.values_list("name", "phase")) == [
        ("l40s-0", "running"),
        ("l40s-3", "running"),  # a new machine: indexes are never reused
    ]
    assert len(plane.sim_vgpus()) == 8


def test_machine_whose_vm_vanished_gets_a_new_vm_with_the_same_vgpus(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=2)
    plane.converge(cluster)
    machine = Machine.objects.get()
    old_vm = machine.vm_id
    vgpu_ids = sorted(v["vgpu_id"] for v in plane.sim_vgpus())
    with whitesky_client(plane.account) as client:  # someone deletes the VM by hand
        client.stop_vm(cloudspace_id="cs-demo-nl", vm_id=old_vm)
        client.delete_vm(cloudspace_id="cs-demo-nl", vm_id=old_vm, detach_gpu=True)

    plane.converge(cluster)

    machine.refresh_from_db()
    assert machine.phase == Machine.Phase.RUNNING, machine.failure_message
    assert machine.vm_id not in (None, old_vm)
    assert [vm["vm_id"] for vm in plane.sim_vms()] == [machine.vm_id]
    assert sorted(v["vgpu_id"] for v in plane.sim_vgpus()) == vgpu_ids  # reused, not re-made
    assert {v["vm_id"] for v in plane.sim_vgpus()} == {machine.vm_id}
