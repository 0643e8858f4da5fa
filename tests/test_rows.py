"""`model_update`: writes only what changed, and only from the state the caller expects."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from capvco_web.rows import model_update, rows_update
from clusters.models import Cluster, Machine
from tests.factories import ClusterFactory, MachineFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster() -> Cluster:
    return ClusterFactory()


def test_update_without_a_change_writes_nothing(cluster: Cluster) -> None:
    with CaptureQueriesContext(connection) as queries:
        assert model_update(cluster, {"state": Cluster.State.ACTIVE}) is False
    assert len(queries) == 0


def test_only_one_of_two_claims_from_the_same_state_wins(cluster: Cluster) -> None:
    stale_copy = Cluster.objects.get(pk=cluster.pk)
    deleting = {"state": Cluster.State.DELETING}
    expect = {"state": Cluster.State.ACTIVE}
    assert model_update(cluster, deleting, expect=expect) is True
    assert model_update(stale_copy, deleting, expect=expect) is False
    # The loser's copy still says what it saw; the database says what the winner wrote.
    assert stale_copy.state == Cluster.State.ACTIVE
    assert Cluster.objects.get(pk=cluster.pk).state == Cluster.State.DELETING


def test_update_writes_only_the_changed_fields(cluster: Cluster) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(imported_from="capi/written-elsewhere")
    assert model_update(cluster, {"state": Cluster.State.DELETING, "name": cluster.name}) is True
    row = Cluster.objects.get(pk=cluster.pk)
    assert (row.state, row.imported_from) == (Cluster.State.DELETING, "capi/written-elsewhere")


def test_many_rows_are_written_except_one_changed_meanwhile() -> None:
    """rows_update: compare-and-set for many rows. Each copy was read before the change;
    the row changed meanwhile keeps what the other writer made of it."""
    rows = [ClusterFactory(imported_from="old") for _ in range(3)]
    Cluster.objects.filter(pk=rows[1].pk).update(
        imported_from="theirs", state=Cluster.State.DELETING
    )
    for row in rows:
        row.imported_from = "ours"

    written = rows_update(rows, {"imported_from"}, where=Q(state=Cluster.State.ACTIVE))

    assert written == 2
    assert dict(Cluster.objects.values_list("pk", "imported_from")) == {
        rows[0].pk: "ours",
        rows[1].pk: "theirs",
        rows[2].pk: "ours",
    }


def test_a_column_set_to_null_in_every_row_is_written_as_its_own_type() -> None:
    """A CASE of NULLs alone is typed text on PostgreSQL: the update casts it."""
    rows = [MachineFactory(vm_started_at=timezone.now()) for _ in range(2)]
    for row in rows:
        row.vm_started_at = None

    assert rows_update(rows, {"vm_started_at"}, where=Q()) == 2
    assert not Machine.objects.filter(vm_started_at__isnull=False).exists()
