"""Actions from the dashboard: each asks for a confirmation with a reason, goes through the
API's service, is audited, and answers with the fragment it changed and a message (htmx)
or a redirect back (no JavaScript). Refusals say why, with 409."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from clusters import services
from clusters.models import Cluster, Machine, MachinePool
from gpus.models import VgpuReservation
from tests.dashboard.conftest import World
from tests.gpus.conftest import Plane
from tests.gpus.test_release import unassigned_made

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}
# A scale reads its pool, the user's roles and the savepoints around its write.
SCALE_READS = 8


def plan_loaded(client: Client, html: str, cluster: Cluster) -> str:
    """The plan the redrawn body asks for on its own (it plans nothing itself)."""
    url = f"/clusters/{cluster.pk}/plan/"
    assert f'hx-get="{url}"' in html
    return client.get(url, **HTMX).content.decode()


def test_the_confirmation_asks_for_a_reason_and_goes_back_where_it_came_from(
    admin_client: Client, world: World
) -> None:
    url = f"/reservations/{world.orphan.pk}/release/?next=/reservations/%3Forphaned%3Dtrue"
    page = admin_client.get(url)
    assert page.status_code == 200 and b"<html" in page.content
    html = page.content.decode()
    assert world.orphan.name in html and 'name="reason"' in html
    assert 'value="/reservations/?orphaned=true"' in html
    fragment = admin_client.get(url, **HTMX).content.decode()
    assert "<html" not in fragment and 'hx-post="/reservations/' in fragment
    assert 'hx-target="#reservation-table"' in fragment


def test_an_action_without_a_reason_is_refused_and_changes_nothing(
    admin_client: Client, world: World
) -> None:
    response = admin_client.post(f"/pools/{world.pool.pk}/scale/", {"replicas": 0, "reason": " "})
    assert response.status_code == 400
    assert "This field is required." in response.content.decode()
    world.pool.refresh_from_db()
    assert world.pool.replicas == 2
    htmx = admin_client.post(f"/pools/{world.pool.pk}/scale/", {"replicas": 0}, **HTMX)
    assert htmx.status_code == 400
    # Drawn into the action panel, where the form is, not over the cluster.
    assert htmx["HX-Retarget"] == "#action-panel"


def test_release_an_orphan_records_the_request_and_answers_with_the_list(
    admin_client: Client, world: World
) -> None:
    response = admin_client.post(
        f"/reservations/{world.orphan.pk}/release/",
        {"reason": "left by a test cluster", "next": "/reservations/?orphaned=true"},
        **HTMX,
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="reservation-table"' in html  # the list it came from, filtered as it was
    assert world.attached[0].name not in html
    assert "Release of capvco-prod-gpu-9-gpu-0 asked for" in html
    assert '<div id="action-panel" hx-swap-oob="true"' in html
    assert "release asked by admin" in html
    world.orphan.refresh_from_db()
    assert world.orphan.release_reason == "left by a test cluster"
    event = AuditEvent.objects.get(action="vgpu.release_requested")
    assert (event.actor_name, event.reason) == ("admin", "left by a test cluster")


def test_a_release_asked_for_on_the_dashboard_is_carried_out_on_whitesky(
    admin_client: Client, plane: Plane, run_tasks: Callable[[], AbstractContextManager[None]]
) -> None:
    row = unassigned_made(plane)
    with run_tasks():
        response = admin_client.post(f"/reservations/{row.pk}/release/", {"reason": "unused"})
    assert response.status_code == 302
    assert plane.sim_vgpus() == []
    release = AuditEvent.objects.get(action="vgpu.release")
    assert (release.actor_name, release.reason) == ("admin", "unused")


def test_without_javascript_an_action_redirects_back_with_its_message(
    admin_client: Client, world: World
) -> None:
    response = admin_client.post(
        f"/pools/{world.pool.pk}/scale/",
        {"replicas": 3, "reason": "more capacity", "next": f"/clusters/{world.cluster.pk}/"},
        follow=True,
    )
    assert response.redirect_chain == [(f"/clusters/{world.cluster.pk}/", 302)]
    assert "scaled from 2 to 3 replicas" in response.content.decode()


def test_a_redirect_goes_to_this_site_only(admin_client: Client, world: World) -> None:
    response = admin_client.post(
        f"/pools/{world.pool.pk}/scale/",
        {"replicas": 3, "reason": "more", "next": "https://evil.example/"},
    )
    assert response["Location"] == f"/clusters/{world.cluster.pk}/"


def test_scale_a_pool_through_the_service_audited(admin_client: Client, world: World) -> None:
    response = admin_client.post(
        f"/pools/{world.pool.pk}/scale/", {"replicas": 1, "reason": "less needed"}, **HTMX
    )
    assert response.status_code == 200
    assert 'id="cluster-body"' in response.content.decode()
    assert MachinePool.objects.get(pk=world.pool.pk).replicas == 1
    event = AuditEvent.objects.get(action="pool.scale")
    assert (event.before, event.after, event.reason) == (
        {"replicas": 2}, {"replicas": 1}, "less needed",
    )  # fmt: skip
    # The plan, loaded apart, shows what the next reconcile does about it.
    html = response.content.decode()
    assert "pool gpu scaled to 1" in plan_loaded(admin_client, html, world.cluster)


def test_scale_beyond_the_pool_limit_is_refused(admin_client: Client, world: World) -> None:
    response = admin_client.post(
        f"/pools/{world.pool.pk}/scale/", {"replicas": 101, "reason": "a lot"}
    )
    assert response.status_code == 400
    assert "less than or equal to 100" in response.content.decode()
    assert MachinePool.objects.get(pk=world.pool.pk).replicas == 2


def test_the_scale_service_refuses_a_negative_size_whoever_calls_it(world: World) -> None:
    with pytest.raises(ValidationError):
        services.pool_scale(
            pool=world.pool, replicas=-1, actor=SystemActor.RECONCILER, reason="idle"
        )
    assert MachinePool.objects.get(pk=world.pool.pk).replicas == 2
    assert not AuditEvent.objects.exists()


def test_delete_a_machine_asks_for_its_teardown(admin_client: Client, world: World) -> None:
    machine = world.machines[0]
    response = admin_client.post(f"/machines/{machine.pk}/delete/", {"reason": "bad GPU"}, **HTMX)
    assert response.status_code == 200
    machine.refresh_from_db()
    assert machine.deletion_asked  # a request of its own (MachineDeletion), for act
    assert AuditEvent.objects.get(action="machine.delete_requested").reason == "bad GPU"
    # The plan: this one torn down, a new one in its place.
    html = plan_loaded(admin_client, response.content.decode(), world.cluster)
    assert "teardown" in html and "deletion requested" in html


def test_force_delete_a_machine_drops_it_and_says_what_stays(
    admin_client: Client, world: World
) -> None:
    machine = world.machines[1]
    response = admin_client.post(
        f"/machines/{machine.pk}/force-delete/",
        {"reason": "stuck teardown", "confirm": machine.name},
        **HTMX,
    )
    assert response.status_code == 200
    assert "are now orphans" in response.content.decode()
    assert not Machine.objects.filter(pk=machine.pk).exists()
    assert AuditEvent.objects.get(action="machine.force_delete").reason == "stuck teardown"


def test_delete_a_cluster_marks_it_deleting(admin_client: Client, world: World) -> None:
    response = admin_client.post(
        f"/clusters/{world.cluster.pk}/delete/",
        {"reason": "project over", "confirm": "prod"},
        **HTMX,
    )
    assert response.status_code == 200
    assert Cluster.objects.get(pk=world.cluster.pk).state == Cluster.State.DELETING
    assert AuditEvent.objects.get(action="cluster.delete_requested").reason == "project over"
    html = response.content.decode()
    assert "cluster is being deleted" in plan_loaded(admin_client, html, world.cluster)


@pytest.mark.parametrize(
    ("path", "name"),
    [("/clusters/{cluster}/delete/", "prod"), ("/machines/{machine}/force-delete/", "")],
)
def test_deleting_a_cluster_or_forcing_a_machine_asks_for_its_name_typed(
    admin_client: Client, world: World, path: str, name: str
) -> None:
    url = _url(path, world)
    name = name or world.machines[0].name
    page = admin_client.get(url).content.decode()
    assert f"Type {name} to confirm" in page and 'name="confirm"' in page

    reason_only = admin_client.post(url, {"reason": "done"}, **HTMX)
    assert reason_only.status_code == 400
    wrong = admin_client.post(url, {"reason": "done", "confirm": "staging"}, **HTMX)
    assert wrong.status_code == 409
    assert f"name, {name}, to confirm" in wrong.content.decode()
    _nothing_changed(world)


def test_releasing_a_machines_gpu_is_refused_with_409_saying_what_to_do(
    admin_client: Client, world: World
) -> None:
    reservation = world.attached[0]
    response = admin_client.post(
        f"/reservations/{reservation.pk}/release/", {"reason": "try"}, **HTMX
    )
    assert response.status_code == 409
    assert response["HX-Retarget"] == "#action-panel"
    assert "scale pool" in response.content.decode()
    reservation.refresh_from_db()
    assert reservation.release_requested_at is None
    assert not AuditEvent.objects.exists()


def test_releasing_twice_is_refused_the_second_time(admin_client: Client, world: World) -> None:
    url = f"/reservations/{world.leak.pk}/release/"
    assert admin_client.post(url, {"reason": "not ours, unused"}).status_code == 302
    again = admin_client.post(url, {"reason": "again"})
    assert again.status_code == 409
    assert "asked for its release already" in again.content.decode()


ACTIONS = [
    ("/reservations/{orphan}/release/", {"reason": "x"}),
    ("/pools/{pool}/scale/", {"replicas": 0, "reason": "x"}),
    ("/machines/{machine}/delete/", {"reason": "x"}),
    ("/machines/{machine}/force-delete/", {"reason": "x", "confirm": "{machine_name}"}),
    ("/clusters/{cluster}/delete/", {"reason": "x", "confirm": "{cluster_name}"}),
]


def _url(path: str, world: World) -> str:
    return path.format(
        orphan=world.orphan.pk,
        pool=world.pool.pk,
        machine=world.machines[0].pk,
        cluster=world.cluster.pk,
    )


def _data(data: dict[str, Any], world: World) -> dict[str, Any]:
    """The form as sent: a typed name filled in."""
    names = {"machine_name": world.machines[0].name, "cluster_name": world.cluster.name}
    return {k: v.format(**names) if isinstance(v, str) else v for k, v in data.items()}


def _nothing_changed(world: World) -> None:
    assert not AuditEvent.objects.exists()
    assert MachinePool.objects.get(pk=world.pool.pk).replicas == 2
    assert not Machine.objects.get(pk=world.machines[0].pk).deletion_asked
    assert Cluster.objects.get(pk=world.cluster.pk).state == Cluster.State.ACTIVE
    assert VgpuReservation.objects.get(pk=world.orphan.pk).release_requested_at is None


@pytest.mark.parametrize(("path", "data"), ACTIONS)
def test_a_viewer_is_refused_each_action_with_403_and_nothing_changes(
    member: Callable[[str], Client], world: World, path: str, data: dict[str, Any]
) -> None:
    viewer = member("viewer")
    url = _url(path, world)
    assert viewer.get(url).status_code == 403
    assert viewer.post(url, data).status_code == 403
    assert viewer.post(url, data, **HTMX).status_code == 403
    _nothing_changed(world)


@pytest.mark.parametrize(("path", "data"), ACTIONS)
def test_another_accounts_objects_are_not_found_and_nothing_changes(
    stranger: Client, world: World, path: str, data: dict[str, Any]
) -> None:
    url = _url(path, world)
    assert stranger.get(url).status_code == 404
    assert stranger.post(url, data).status_code == 404
    _nothing_changed(world)


@pytest.mark.parametrize(
    ("path", "data", "action"),
    [
        (*ACTIONS[0], "vgpu.release_requested"),
        (*ACTIONS[1], "pool.scale"),
        (*ACTIONS[2], "machine.delete_requested"),
        (*ACTIONS[3], "machine.force_delete"),
        (*ACTIONS[4], "cluster.delete_requested"),
    ],
)
def test_an_operator_does_each_action_audited_in_their_name(
    member: Callable[[str], Client],
    world: World,
    path: str,
    data: dict[str, Any],
    action: str,
) -> None:
    operator = member("operator")
    response = operator.post(_url(path, world), _data(data, world), **HTMX)
    assert response.status_code == 200, response.content
    event = AuditEvent.objects.get(action=action)
    assert event.actor is not None and event.account_id == world.cluster.account_id
    assert event.actor.memberships.get().role.name == "operator"
    done = {
        "vgpu.release_requested": lambda: (
            VgpuReservation.objects.get(pk=world.orphan.pk).release_requested_at
        ),
        "pool.scale": lambda: MachinePool.objects.get(pk=world.pool.pk).replicas == 0,
        "machine.delete_requested": lambda: (
            Machine.objects.get(pk=world.machines[0].pk).deletion_asked
        ),
        "machine.force_delete": lambda: (
            not Machine.objects.filter(pk=world.machines[0].pk).exists()
        ),
        "cluster.delete_requested": lambda: (
            Cluster.objects.get(pk=world.cluster.pk).state == Cluster.State.DELETING
        ),
    }
    assert done[action]()


def test_actions_need_a_post_to_act(admin_client: Client, world: World) -> None:
    admin_client.get(f"/clusters/{world.cluster.pk}/delete/?reason=x")
    assert Cluster.objects.get(pk=world.cluster.pk).state == Cluster.State.ACTIVE


def test_cancel_empties_the_panel_or_goes_back(admin_client: Client, world: World) -> None:
    assert admin_client.get("/dismiss/", **HTMX).content == b""
    response = admin_client.get("/dismiss/?next=/clusters/")
    assert response["Location"] == "/clusters/"


def test_a_scale_click_redraws_the_pools_without_planning_the_cluster(
    admin_client: Client, world: World
) -> None:
    """The scale's answer is the body (the write, then the body's own reads): the plan,
    which reads every machine, vGPU and listed VM of the cluster, is a request of its own."""
    body = {"HTTP_HX_TARGET": "cluster-body", **HTMX}
    with CaptureQueriesContext(connection) as redraw:
        admin_client.get(f"/clusters/{world.cluster.pk}/", **body)
    with CaptureQueriesContext(connection) as planned:
        admin_client.get(f"/clusters/{world.cluster.pk}/plan/", **HTMX)
    with CaptureQueriesContext(connection) as scale:
        response = admin_client.post(
            f"/pools/{world.pool.pk}/scale/", {"replicas": 3, "reason": "more"}, **HTMX
        )
    assert response.status_code == 200
    assert f'hx-get="/clusters/{world.cluster.pk}/plan/"' in response.content.decode()
    writes = [q for q in scale.captured_queries if not q["sql"].startswith("SELECT")]
    assert len(scale) <= len(redraw) + len(writes) + SCALE_READS, [
        q["sql"] for q in scale.captured_queries
    ]

    # The planner's read of every VM listed in the cluster's cloudspaces: not the scale's.
    def vms_listed(queries: CaptureQueriesContext) -> list[str]:
        return [
            q["sql"]
            for q in queries.captured_queries
            if 'FROM "cloud_virtualmachine"' in q["sql"] and "EXISTS" in q["sql"]
        ]

    assert vms_listed(planned) and not vms_listed(scale) and not vms_listed(redraw)
