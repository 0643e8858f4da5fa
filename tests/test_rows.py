"""`model_update`: writes only what changed, and only from the state the caller expects."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from capvco_web.rows import model_update
from clusters.models import Cluster
from tests.factories import ClusterFactory

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
    Cluster.objects.filter(pk=cluster.pk).update(deletion_blockers=["written elsewhere"])
    assert model_update(cluster, {"state": Cluster.State.DELETING, "name": cluster.name}) is True
    row = Cluster.objects.get(pk=cluster.pk)
    assert (row.state, row.deletion_blockers) == (Cluster.State.DELETING, ["written elsewhere"])
