"""The readings of the test plane must be able to fail: what the lifecycle tests assert with
them would otherwise hold whatever the code did."""

from __future__ import annotations

from cloud.whitesky import whitesky_client
from tests.gpus.conftest import NL, Plane


def test_unassigned_billed_shows_a_reservation_billed_without_a_vm(plane: Plane) -> None:
    with whitesky_client(plane.account) as client:
        card = client.list_gpu_profiles(location=NL)[0].id
        kept = client.reserve_vgpu(location=NL, gpu_id=card, name="capvco-gone-x-0-gpu-0")
        gone = client.reserve_vgpu(location=NL, gpu_id=card, name="capvco-gone-x-1-gpu-0")
        client.release_vgpu(location=NL, vgpu_id=gone)

    billed = plane.unassigned_billed()

    assert set(billed) == {kept}
