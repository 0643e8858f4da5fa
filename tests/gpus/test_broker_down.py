"""The broker's Redis down (restarted, failed over): a person's request is still accepted,
kept on its row, and carried out from that row once the broker is back. The broker and
the cache are the real Redis client pointed at a port nobody listens on."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from capvco_web import celery_app
from capvco_web.queued import queued_clear, queued_mark
from cloud.models import Location
from clusters.models import MachinePool
from clusters.tasks import observe_all, observe_location, orphan_sweep_all
from gpus.models import VgpuReservation
from tests.factories import MembershipFactory
from tests.gpus.conftest import BE, Plane
from tests.gpus.test_release import unassigned_made


def closed_port() -> int:
    """A port on 127.0.0.1 that refuses connections: bound for a moment, then let go."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def broker_down(settings: Any) -> Iterator[str]:
    """The broker and the cache (the broker's Redis, as in production without CACHE_URL)
    unreachable, the way a restarted or failed-over Redis is."""
    url = f"redis://127.0.0.1:{closed_port()}/0"
    settings.CACHES = {
        "default": {"BACKEND": "capvco_web.cache.RedisCacheOrLocal", "LOCATION": url}
    }
    was = celery_app.conf.broker_write_url
    broker_use(url)
    try:
        yield url
    finally:
        broker_use(was)


def broker_use(url: str) -> None:
    """Point this process's Celery app at `url`: its connection and producer pools are made
    again from the setting at the next send."""
    celery_app.conf.broker_url = celery_app.conf.broker_write_url = url
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@pytest.fixture
def api_user(plane: Plane) -> User:
    membership = MembershipFactory(user__username="ops", account=plane.account, role="operator")
    return membership.user  # type: ignore[no-any-return]


def test_with_the_broker_down_a_release_and_a_scale_are_accepted_and_carried_out_after(
    plane: Plane,
    api: APIClient,
    broker_down: str,
    django_capture_on_commit_callbacks: Any,
    caplog: pytest.LogCaptureFixture,
    run_tasks: Any,
    settings: Any,
) -> None:
    cluster = plane.cluster()
    pool = plane.pool(cluster, "t4", location=BE, gpu_type="NVIDIA T4", gpu_count=1, replicas=0)
    row = unassigned_made(plane)

    with caplog.at_level(logging.WARNING), django_capture_on_commit_callbacks(execute=True):
        release = api.post(
            f"/api/v1/reservations/{row.pk}/release/", {"reason": "not needed"}, format="json"
        )
        scale = api.post(
            f"/api/v1/pools/{pool.pk}/scale/", {"replicas": 1, "reason": "more"}, format="json"
        )
        listing = api.get("/api/v1/reservations/")

    assert (release.status_code, scale.status_code) == (202, 200), (release.data, scale.data)
    assert listing.status_code == 200  # reads answer too: the throttle counts in memory
    row.refresh_from_db()
    assert row.release_requested_at is not None  # the request is on its row
    assert MachinePool.objects.get(pk=pool.pk).replicas == 1
    assert len(plane.sim_vgpus()) == 1  # nothing carried out yet: the task was never sent
    assert "broker" in caplog.text and "reservation_release_task" in caplog.text
    assert "Traceback" not in caplog.text

    # The broker is back: beat's own passes find both requests again from their rows.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with run_tasks():
        orphan_sweep_all()
    plane.converge(cluster)
    assert [v["vgpu_name"] for v in plane.sim_vgpus()] == ["capvco-demo-t4-0-gpu-0"]
    assert VgpuReservation.objects.get(pk=row.pk).release_requested_at is not None


def test_an_observation_the_broker_refused_is_not_left_marked_queued(
    plane: Plane,
    broker_down: str,
    django_capture_on_commit_callbacks: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Here the marks' Redis answers and the broker does not: a tick's sends fail, and
    their marks go with them, so the next tick after the broker is back sends them."""
    locations = list(Location.objects.order_by("pk").values_list("pk", flat=True))
    assert locations

    with caplog.at_level(logging.WARNING), django_capture_on_commit_callbacks(execute=True):
        observe_all()

    assert "observe_location not sent" in caplog.text
    newly_marked = queued_mark(observe_location.name, locations, 60)
    for location_id in newly_marked:
        queued_clear(observe_location.name, location_id)
    assert newly_marked == locations  # none was left marked by the refused sends
