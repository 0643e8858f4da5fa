"""A machine whose GPU type is there but has no card with room now waits for capacity:
not failed, saying what is free, on the API, the plan and the cluster page; it is looked
at again after the same backoff as a failure, and runs once room returns. Waiting past
MACHINE_CAPACITY_STUCK_SECONDS, it is flagged stuck, naming what the location offers of
every type, told and counted, and keeps waiting."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.models import Machine, MachinePool
from notify.models import Notice, Reason, WebhookTarget
from notify.services import notify_pass
from tests.gpus.conftest import NL, Plane
from tests.gpus.test_metrics import allowed, scraped, value  # noqa: F401 (a fixture)
from tests.notify.test_webhooks import Receiver, receiver  # noqa: F401 (a fixture)

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


@pytest.mark.usefixtures("allowed")
@override_settings(MACHINE_RETRY_BASE_SECONDS=30, MACHINE_CAPACITY_STUCK_SECONDS=3600)
def test_a_machine_waiting_past_the_bound_is_stuck_naming_the_whole_offer_and_is_told(
    plane: Plane,
    admin_user: User,
    admin_client: Client,
    receiver: Receiver,  # noqa: F811 (the fixture imported above)
    settings: Any,
) -> None:
    api = APIClient()
    api.force_authenticate(admin_user)
    cluster = plane.cluster()
    plane.pool(cluster, "l40s", gpu_type="NVIDIA L40S", gpu_count=4, replicas=3)
    plane.converge(cluster, passes=3)
    waiting = Machine.objects.get(name="l40s-2")
    WebhookTarget.objects.create(
        account=plane.account, name="ops", url=receiver.url, reasons=[Reason.MACHINE_STUCK]
    )

    # Within the bound it only waits: nothing is told.
    notify_pass()
    assert receiver.posts == []
    assert value(scraped(Client()), "capvco_machines_stuck", account=str(plane.account.pk)) == 0

    # Past the bound (made zero here, as if the hour had passed), the next look flags it.
    settings.MACHINE_CAPACITY_STUCK_SECONDS = 0
    Machine.objects.filter(pk=waiting.pk).update(next_try_at=timezone.now())
    plane.converge(cluster, passes=1)

    shown = api.get(f"/api/v1/machines/{waiting.pk}/").json()
    assert shown["phase"] == "pending"  # it still waits, and is made once room returns
    assert shown["capacity_stuck_since"] is not None
    assert shown["capacity_wait_since"] <= shown["capacity_stuck_since"]
    message = shown["failure_message"]
    assert message.startswith(WAITING)
    # The location's whole offer, not only the type asked for.
    assert f"{NL} offers: " in message
    assert "NVIDIA A100: " in message and "NVIDIA L40S: 0 free on 2 card(s)" in message
    page = admin_client.get(f"/clusters/{cluster.pk}/").content.decode()
    assert "stuck</span>" in page
    assert value(scraped(Client()), "capvco_machines_stuck", account=str(plane.account.pk)) == 1

    notify_pass()
    (told,) = receiver.bodies()
    assert told["reason"] == Reason.MACHINE_STUCK
    assert told["details"]["machine"] == "l40s-2" and f"{NL} offers: " in told["details"]["why"]

    # Room returns: it runs, the flag and the wait end, and the notice closes.
    Machine.objects.filter(name="l40s-0").update(delete_requested=True)
    MachinePool.objects.filter(name="l40s").update(replicas=2)
    plane.converge(cluster)
    Machine.objects.filter(pk=waiting.pk).update(next_try_at=timezone.now())
    plane.converge(cluster)
    waiting.refresh_from_db()
    assert waiting.phase == Machine.Phase.RUNNING, waiting.failure_message
    assert (waiting.capacity_wait_since, waiting.capacity_stuck_since) == (None, None)
    assert value(scraped(Client()), "capvco_machines_stuck", account=str(plane.account.pk)) == 0
    notify_pass()
    assert Notice.objects.get(reason=Reason.MACHINE_STUCK).closed_at is not None
