"""The fault run's measure of money tracked (tests/chaos_ops.py `untracked`): what
whitesky bills that we neither recorded nor listed is named until a listing shows it;
what was gone since is not counted."""

from __future__ import annotations

from cloud.whitesky import whitesky_client
from clusters.models import Machine
from gpus import naming
from tests.chaos_ops import untracked
from tests.gpus.conftest import CLOUDSPACES, NL, Plane


def test_a_vgpu_and_a_vm_of_ours_unrecorded_are_untracked_until_a_listing_shows_them(
    plane: Plane,
) -> None:
    plane.cluster("demo")  # its cloudspaces are listed
    vm = naming.vm_name("demo", "lost-0")  # a create whose row was never written
    made = plane.sim.seed(CLOUDSPACES[NL], vm_names=[vm], vgpus=1, prefix="hand")
    # Whitesky's whole listing, taken after both were made (as after a fault's end).
    billed = plane.sim.state()
    vm_id = made["vm_ids"][0]
    vgpu_id = made["vgpu_ids"][0]

    assert sorted(untracked(plane.sim, billed)) == [
        f"VM {vm} ({vm_id})",
        f"vGPU hand-vgpu-0 ({vgpu_id})",
    ]

    plane.observe()  # a complete listing of every location: both shown with their cost

    assert untracked(plane.sim, billed) == []


def test_what_whitesky_no_longer_bills_is_not_counted(plane: Plane) -> None:
    made = plane.sim.seed(CLOUDSPACES[NL], vgpus=2, prefix="hand")
    billed = plane.sim.state()
    gone, kept = made["vgpu_ids"]

    with whitesky_client(plane.account) as client:
        client.release_vgpu(location=NL, vgpu_id=gone)

    assert untracked(plane.sim, billed) == [f"vGPU hand-vgpu-1 ({kept})"]


def test_a_vm_of_a_machine_whose_create_answer_was_lost_is_tracked_by_its_name(
    plane: Plane,
) -> None:
    cluster = plane.cluster("demo")
    pool = plane.pool(cluster, "gpu")
    machine = Machine.objects.create(pool=pool, index=0, name="gpu-0")  # no VM id yet
    made = plane.sim.seed(CLOUDSPACES[NL], vm_names=[machine.vm_name, "capvco-demo-other-0"])
    other = made["vm_ids"][1]

    # Recorded before its create was sent: the machine's row names it, not yet its id.
    assert untracked(plane.sim, plane.sim.state()) == [f"VM capvco-demo-other-0 ({other})"]
