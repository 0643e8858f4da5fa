"""The audit log: newest first, filtered by actor, action, object and time, with links to
the objects that still exist."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from capvco_web.models import AuditEvent
from tests.dashboard.conftest import World
from tests.factories import AuditEventFactory

pytestmark = pytest.mark.django_db


def events(client: Client, query: str = "") -> list[AuditEvent]:
    response = client.get(f"/audit/?{query}")
    assert response.status_code == 200, response.content
    return [row.event for row in response.context["rows"]]


def test_filters_by_actor_action_object_and_time(admin_client: Client, world: World) -> None:
    old = AuditEventFactory(
        actor_name="alice", action="pool.scale", object_type="clusters.MachinePool"
    )
    AuditEvent.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    release = AuditEventFactory(actor_name="bob", object_repr="capvco-prod-gpu-9-gpu-0")
    assert events(admin_client) == [release, old]
    assert events(admin_client, "actor=ALICE") == [old]
    assert events(admin_client, "action=vgpu.") == [release]
    assert events(admin_client, "object=gpu-9") == [release]
    assert events(admin_client, "object_type=gpus.VgpuReservation") == [release]
    since = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert events(admin_client, f"since={since}") == [release]
    assert events(admin_client, f"until={since}") == [old]


def test_a_bad_time_is_a_clear_error(admin_client: Client, world: World) -> None:
    response = admin_client.get("/audit/?since=yesterday")
    assert response.status_code == 400
    assert "Enter a valid date/time" in response.content.decode()


def test_a_time_with_a_nul_is_a_clear_error(admin_client: Client, world: World) -> None:
    response = admin_client.get("/audit/", {"since": "2026-12-01T00:00\x00"})
    assert response.status_code == 400
    assert "Enter a valid date/time" in response.content.decode()


def test_events_link_the_objects_that_still_exist(admin_client: Client, world: World) -> None:
    AuditEventFactory(
        object_type="gpus.VgpuReservation", object_id=str(world.orphan.pk), object_repr="x"
    )
    AuditEventFactory(
        object_type="clusters.Machine", object_id=str(world.machines[0].pk), object_repr="m"
    )
    AuditEventFactory(object_type="clusters.Machine", object_id="999999", object_repr="gone")
    links = {row.event.object_repr: row.link for row in admin_client.get("/audit/").context["rows"]}
    assert links == {
        "x": f"/reservations/?q={world.orphan.name}",
        "m": f"/clusters/{world.cluster.pk}/#machine-{world.machines[0].pk}",
        "gone": "",
    }
