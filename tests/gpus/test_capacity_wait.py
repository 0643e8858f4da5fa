"""A machine whose GPU type is there but has no card with room now waits for capacity:
not failed, saying what is free, on the API, the plan and the cluster page; it is looked
at again after the same backoff as a failure, and runs once room returns."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.models import Machine
from tests.gpus.conftest import NL, Plane

WAITING = (
    f"waiting for capacity: 0 free of NVIDIA L40S at {NL}, at most 0 on one card; "
    "a machine needs 4 on one card"
)


@override_settings(MACHINE_RETRY_BASE_SECONDS=30)
def test_a_machine_without_room_says_it_waits_and_what_is_free(
    plane: Plane, admin_user: User, admin_client: Client
) -> None:
    api = APIClient()
    api.force_authenticate(admin_user)
    cluster = plane.cluster()
    # 2 L40S cards of 4 instances: the first two machines fill them.
    pool = plane.pool(cluster, "l40s", gpu_type="NVIDIA L40S", gpu_count=4, replicas=3)
    plane.converge(cluster, passes=3)
    waiting = Machine.objects.get(name="l40s-2")

    shown = api.get(f"/api/v1/machines/{waiting.pk}/").json()
    plan = api.get(f"/api/v1/clusters/{cluster.pk}/plan/").json()
    page = admin_client.get(f"/clusters/{cluster.pk}/").content.decode()

    assert (shown["phase"], shown["failure_message"]) == ("pending", WAITING)
    assert shown["failures"] == 1 and shown["next_try_at"] is not None
    (step,) = [s for s in plan if s["target"] == "l40s-2"]
    assert step["blocked_by"] == "backoff" and step["calls"] == []
    assert step["blocked"].startswith(f"{WAITING} (looked 1 time(s)); next try at ")
    assert "waiting for capacity</span>" in page and WAITING in page
    assert "failed 1\N{MULTIPLICATION SIGN}" not in page

    # Room returns (a machine goes); after its backoff the waiting machine gets it.
    Machine.objects.filter(name="l40s-0").update(delete_requested=True)
    pool.replicas = 2
    pool.save()
    plane.converge(cluster)
    Machine.objects.filter(pk=waiting.pk).update(next_try_at=timezone.now())
    plane.converge(cluster)

    waiting.refresh_from_db()
    assert waiting.phase == Machine.Phase.RUNNING, waiting.failure_message
    assert (waiting.failures, waiting.next_try_at, waiting.failure_message) == (0, None, "")
