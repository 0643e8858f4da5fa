"""One writer per row: what whitesky lists (ListedVgpu) is written by the mirror alone;
the reservations we keep (VgpuReservation) by gpus' services and release requests over a
cluster's life (a person's release is asked for through clusters, which knows what holds
the vGPU; the row is still written by gpus alone). Every statement that writes either
table is caught over that life: provisioning, a force delete and its orphan released by
the sweep, a reservation made behind our back and released by a person, and the
cluster's teardown. (A machine's VM replaced and an account deleted write reservations
too: docs/architecture.md, Who owns what.)"""

from __future__ import annotations

import re
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import connection

from capvco_web.audit import SystemActor
from cloud.whitesky import whitesky_client
from clusters.models import Machine
from clusters.releases import reservation_release_request
from clusters.services import cluster_delete, machine_force_delete
from gpus.models import GpuProfile, VgpuReservation
from tests.gpus.conftest import NL, Plane
from tests.gpus.support import auto_release_set, sweep

ROOT = Path(__file__).resolve().parents[2]
WRITE = re.compile(
    r'^\s*(?:INSERT INTO|UPDATE|DELETE FROM)\s+"(gpus_listedvgpu|gpus_vgpureservation)"'
)
# The database's own ON DELETE SET NULL, run by Django's collector for whoever deletes a
# machine: the reservation's link to it goes with the machine, and nothing else changes.
MACHINE_GONE = re.compile(r'^\s*UPDATE "gpus_vgpureservation" SET "machine_id" = NULL WHERE')


# Writing machinery any writer calls: the writer is the module that called it.
MACHINERY = {"capvco_web/rows.py"}


def _writer() -> str:
    """The project module (not a test, not a library, not the machinery) whose call wrote."""
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename).resolve()
        if not path.is_relative_to(ROOT) or {".venv", "tests"} & set(path.parts):
            continue
        if (module := str(path.relative_to(ROOT))) not in MACHINERY:
            return module
    return "(tests)"


@contextmanager
def writers() -> Iterator[dict[str, set[str]]]:
    seen: dict[str, set[str]] = defaultdict(set)

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        if (found := WRITE.match(sql)) and not MACHINE_GONE.match(sql):
            seen[found.group(1)].add(_writer())
        return execute(sql, params, many, ctx)

    with connection.execute_wrapper(wrapper):
        yield seen


def test_each_vgpu_table_has_one_writer_over_a_whole_life(plane: Plane, admin_user: Any) -> None:
    auto_release_set(plane.account, confirmations=1)
    with writers() as seen:
        cluster = plane.cluster()
        plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1, replicas=2)
        plane.converge(cluster)
        machine_force_delete(
            machine=Machine.objects.get(name="a100-0"), actor=SystemActor.RECONCILER, reason="stuck"
        )
        card = GpuProfile.objects.filter(location__name=NL).first()
        assert card is not None
        with whitesky_client(plane.account) as client:
            client.reserve_vgpu(location=NL, gpu_id=card.profile_id, name="team-x-gpu")
        plane.observe()
        sweep(plane)  # the force-deleted machine's orphan goes
        foreign = VgpuReservation.objects.get(name="team-x-gpu")
        reservation_release_request(reservation=foreign, actor=admin_user, reason="not ours")
        sweep(plane)
        cluster_delete(
            cluster=cluster, actor=admin_user, reason="end of project", confirm=cluster.name
        )
        plane.converge(cluster)
        plane.observe()

    assert plane.sim_vgpus("") == []  # everything made above was released
    assert set(VgpuReservation.objects.values_list("state", flat=True)) == {"released"}
    assert dict(seen) == {
        "gpus_listedvgpu": {"gpus/mirror.py"},
        "gpus_vgpureservation": {"gpus/services.py", "gpus/release_requests.py"},
    }
