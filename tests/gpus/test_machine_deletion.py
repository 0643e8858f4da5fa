"""A person's request to delete a machine is a row of its own (MachineDeletion), written by
the services alone; the machine's row is act's. The request never writes under act's
compare-and-set token, and act still sees it: a step planned before the request is
dropped, not carried out over it."""

from __future__ import annotations

from typing import Any

import pytest

from capvco_web.plans import StepDropped
from cloud.whitesky import whitesky_client
from clusters.models import Machine, MachineDeletion
from clusters.plan import MachineProvision, MachineTeardown, cluster_plan
from clusters.reconcile import PassContext, machine_create, machine_reconcile
from clusters.services import machine_delete
from tests.gpus.conftest import NL, Plane


def test_a_deletion_asked_after_the_plan_stops_its_step_without_touching_acts_row(
    plane: Plane, admin_user: Any
) -> None:
    cluster = plane.cluster("prod", sites=(NL,))
    pool = plane.pool(cluster, "cpu")
    plane.observe()
    made = machine_create(pool_id=pool.pk, index=0, name=f"{pool.name}-0")
    assert made is not None
    (step,) = [
        s
        for s in cluster_plan(cluster).steps
        if isinstance(s, MachineProvision) and s.machine_id == made.pk
    ]
    assert step.kind == "provision"

    machine_delete(machine=made, actor=admin_user, reason="not needed")

    # The request is its own row; the machine's row, act's token included, is as planned.
    asked = MachineDeletion.objects.get(machine=made)
    assert (asked.requested_by, asked.reason) == (admin_user, "not needed")
    row = Machine.objects.get(pk=made.pk)
    assert (row.updated_at, row.delete_requested) == (step.seen, False)
    with (
        whitesky_client(plane.account) as client,
        pytest.raises(StepDropped, match="changed since the plan; dropped"),
    ):
        machine_reconcile(PassContext(client), step)
    assert plane.sim_vms() == []  # no VM made for a machine asked away

    # The next plan tears it down, and act takes the request up on its own row.
    (teardown,) = [
        s
        for s in cluster_plan(cluster).steps
        if isinstance(s, MachineTeardown) and s.machine_id == made.pk
    ]
    assert teardown.kind == "teardown"
    plane.converge(cluster)
    assert not Machine.objects.filter(pk=made.pk).exists()
    assert not MachineDeletion.objects.exists()  # gone with its machine
