"""A machine's changes of phase are its history: each one the reconciler makes is an audit
event (`machine.phase`, before and after, with the message), written with the change."""

from __future__ import annotations

from itertools import pairwise

from capvco_web.models import AuditEvent
from clusters.models import Machine
from tests.gpus.conftest import Plane


def phases(machine: Machine) -> list[tuple[str, str]]:
    events = AuditEvent.objects.filter(
        action="machine.phase", object_type="clusters.Machine", object_id=str(machine.pk)
    ).order_by("pk")
    return [(e.before["phase"], e.after["phase"]) for e in events]


def test_each_phase_a_machine_goes_through_is_recorded_once_in_order(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "web")
    plane.converge(cluster)
    machine = Machine.objects.get()
    assert machine.phase == Machine.Phase.RUNNING

    changes = phases(machine)
    # A chain from the first phase to running: each change starts where the last ended.
    assert changes[0][0] == Machine.Phase.PENDING and changes[-1][1] == Machine.Phase.RUNNING
    assert all(a[1] == b[0] for a, b in pairwise(changes))
    event = AuditEvent.objects.filter(action="machine.phase").last()
    assert event is not None and event.actor_name == "reconciler"
    assert event.account_id == cluster.account_id  # its account's members see it

    plane.converge(cluster)  # nothing changes: nothing recorded
    assert phases(machine) == changes
