"""Who sees what: a superuser sees everything and is offered every action; a user with no
role in any account sees nothing (empty lists, a cluster not found) and no action button."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.dashboard.conftest import World
from tests.factories import AuditEventFactory

pytestmark = pytest.mark.django_db

BUTTONS = ["/release/", "/scale/", "/delete/", "/force-delete/"]


def test_a_user_without_a_role_sees_empty_pages(logged_in_client: Client, world: World) -> None:
    AuditEventFactory()
    overview = logged_in_client.get("/")
    assert overview.status_code == 200
    assert overview.context["board"] == []
    assert all(kind.count == 0 for kind in overview.context["waste"])
    assert overview.context["observations"] == [] and overview.context["failed"] == []
    assert logged_in_client.get("/reservations/").context["rows"] == []
    assert logged_in_client.get("/clusters/").context["summaries"] == []
    assert logged_in_client.get("/audit/").context["rows"] == []
    csv = logged_in_client.get("/reservations/csv/")
    assert len(b"".join(csv.streaming_content).splitlines()) == 1  # type: ignore[attr-defined]


def test_a_user_without_a_role_does_not_find_a_cluster(
    logged_in_client: Client, world: World
) -> None:
    assert logged_in_client.get(f"/clusters/{world.cluster.pk}/").status_code == 404


def test_a_superuser_sees_the_rows_and_is_offered_each_action(
    admin_client: Client, world: World
) -> None:
    reservations = admin_client.get("/reservations/").content.decode()
    assert f"/reservations/{world.orphan.pk}/release/" in reservations
    # A machine's GPU goes with its machine: no release offered.
    assert f"/reservations/{world.attached[0].pk}/release/" not in reservations
    cluster = admin_client.get(f"/clusters/{world.cluster.pk}/").content.decode()
    for path in [
        f"/pools/{world.pool.pk}/scale/",
        f"/machines/{world.machines[0].pk}/delete/",
        f"/machines/{world.machines[0].pk}/force-delete/",
        f"/clusters/{world.cluster.pk}/delete/",
    ]:
        assert path in cluster
