"""The act state split off clusters and machines (clusters 0024): a database with rows of
the old schema is migrated forward and back, and what act found (a cluster's deletion
blockers) and what people asked (a machine's deletion, with who and why from the audit)
come out in their new homes, and back."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from clusters.models import Machine, MachineDeletion
from tests.factories import AccountFactory

BEFORE = [("clusters", "0026_observed_cluster_state_to_kube")]
AFTER = [("clusters", "0027_act_state_rows")]


def _old_rows(apps: Any, account_id: int, user_id: int) -> dict[str, int]:
    get = apps.get_model
    deleting = get("clusters", "Cluster").objects.create(
        name="old", account_id=account_id, state="deleting", deletion_blockers=["vm x listed"]
    )
    active = get("clusters", "Cluster").objects.create(name="live", account_id=account_id)
    location = get("cloud", "Location").objects.create(account_id=account_id, name="nl-1")
    site = get("clusters", "ClusterSite").objects.create(
        cluster=active, location=location, cloudspace_id="cs", image_id=1
    )
    pool = get("clusters", "MachinePool").objects.create(cluster=active, site=site, name="p")
    machines = get("clusters", "Machine").objects
    asked = machines.create(pool=pool, index=0, name="p-0", delete_requested=True)
    kept = machines.create(pool=pool, index=1, name="p-1")
    get("capvco_web", "AuditEvent").objects.create(
        actor_id=user_id, actor_name="alice", action="machine.delete_requested",
        object_type="clusters.Machine", object_id=str(asked.pk), object_repr="live/p-0",
        reason="broken disk", account_id=account_id,
    )  # fmt: skip
    return {"deleting": deleting.pk, "active": active.pk, "asked": asked.pk, "kept": kept.pk}


@pytest.mark.django_db(transaction=True)
def test_blockers_and_deletion_requests_move_to_their_rows_and_back() -> None:
    account = AccountFactory()
    alice = User.objects.create_user("alice")
    MigrationExecutor(connection).migrate(BEFORE)
    old = _old_rows(
        MigrationExecutor(connection).loader.project_state(BEFORE).apps, account.pk, alice.pk
    )

    MigrationExecutor(connection).migrate(AFTER)
    # The status row as it was then (it has gained columns since).
    statuses = (
        MigrationExecutor(connection)
        .loader.project_state(AFTER)
        .apps.get_model("clusters", "ClusterStatus")
    ).objects
    assert statuses.get(cluster_id=old["deleting"]).deletion_blockers == ["vm x listed"]
    assert not statuses.filter(cluster_id=old["active"]).exists()
    deletion = MachineDeletion.objects.get()
    assert (deletion.machine_id, deletion.requested_by, deletion.reason) == (
        old["asked"], alice, "broken disk",
    )  # fmt: skip
    assert Machine.objects.get(pk=old["asked"]).deletion_asked
    assert not Machine.objects.get(pk=old["kept"]).deletion_asked

    MigrationExecutor(connection).migrate(BEFORE)
    apps = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    clusters = apps.get_model("clusters", "Cluster").objects
    assert clusters.get(pk=old["deleting"]).deletion_blockers == ["vm x listed"]
    machines = apps.get_model("clusters", "Machine").objects
    assert set(machines.filter(delete_requested=True).values_list("pk", flat=True)) == {
        old["asked"]
    }
    MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
