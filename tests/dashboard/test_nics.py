"""The SR-IOV page: each pod's NIC with its filters and pages, each VM's attach queue, the
leaked NICs with the operator's detach (confirmed, with a reason, audited), the address
use of the external networks; and the SR-IOV card of a cluster. A member sees their
accounts' NICs only; a viewer is offered no detach and is refused one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from capvco_web.models import AuditEvent
from sriov.models import LeakedNic, PodNic, SriovConfig
from tests.dashboard.conftest import World
from tests.factories import (
    JWT,
    AccountFactory,
    ClusterFactory,
    ExternalNetworkFactory,
    LeakedNicFactory,
    LocationFactory,
    PodNicFactory,
)

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}
State = PodNic.State


@dataclass
class Nics:
    attached: PodNic
    failed: PodNic
    attaching: PodNic
    waiting: PodNic
    leaked: LeakedNic
    theirs: PodNic
    their_leak: LeakedNic


@pytest.fixture
def nics(world: World) -> Nics:
    now = timezone.now()
    SriovConfig.objects.create(
        cluster=world.cluster, enabled=True, external_network="pods-net", credential=JWT
    )
    ExternalNetworkFactory(location=world.fresh, network_id=900, name="pods-net")
    on = {"cluster": world.cluster, "location": world.fresh}
    attached = PodNicFactory(**on, namespace="ml", pod_name="train-0", ip="10.50.0.7")
    failed = PodNicFactory(
        **on,
        pod_name="web-1",
        state=State.FAILED,
        mac="",
        ip=None,
        failure="whitesky refuses NIC attach on a running VM",
    )
    attaching = PodNicFactory(**on, pod_name="web-2", state=State.ATTACHING, mac="", ip=None)
    waiting = PodNicFactory(**on, pod_name="web-3", state=State.REQUESTED, mac="", ip=None)
    PodNic.objects.filter(pk=waiting.pk).update(requested_at=now - timedelta(minutes=2))
    leaked = LeakedNicFactory(**on, mac="52:54:00:aa:bb:cc", ip="10.50.0.99")
    account = AccountFactory(name="globex")
    theirs_cluster = ClusterFactory(account=account, name="theirs")
    where = LocationFactory(account=account, name="de-other-dc01")
    ExternalNetworkFactory(location=where, name="their-net")
    theirs = PodNicFactory(cluster=theirs_cluster, location=where, pod_name="their-pod")
    their_leak = LeakedNicFactory(cluster=theirs_cluster, location=where, mac="52:54:00:de:ad:00")
    return Nics(attached, failed, attaching, waiting, leaked, theirs, their_leak)


def test_the_page_shows_each_pods_nic_the_queues_the_leaks_and_the_address_use(
    admin_client: Client, world: World, nics: Nics
) -> None:
    response = admin_client.get("/nics/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" in html and 'href="/nics/">NICs</a>' in html
    assert "ml/train-0" in html and "10.50.0.7/24" in html and nics.attached.mac in html
    assert "whitesky refuses NIC attach on a running VM" in html
    (queue,) = [q for q in response.context["queues"] if q.vm_id == 7000]
    assert [n.pod_name for n in queue.in_turn] == ["web-2"]
    assert [n.pod_name for n in queue.waiting] == ["web-3"]
    assert {row.nic.mac for row in response.context["leaked"]} == {
        "52:54:00:aa:bb:cc",
        "52:54:00:de:ad:00",
    }
    assert f"/nics/leaked/{nics.leaked.pk}/detach/" in html
    use = {u.name: u for u in response.context["networks"]}
    # Attached and attaching hold an address; requested and failed do not.
    assert use["pods-net"].nics == 2 and use["pods-net"].free_addresses == 250
    assert 'style="' not in html and "<script>" not in html


def test_htmx_gets_only_the_part_it_asked_for(
    admin_client: Client, world: World, nics: Nics
) -> None:
    table = admin_client.get("/nics/", **HTMX, HTTP_HX_TARGET="nic-table")
    assert table.status_code == 200 and "HX-Request" in table["Vary"]
    html = table.content.decode()
    assert "<html" not in html and 'id="nic-table"' in html and "ml/train-0" in html
    assert 'id="leaked"' not in html
    activity = admin_client.get("/nics/", **HTMX, HTTP_HX_TARGET="nic-activity").content.decode()
    assert 'id="nic-activity"' in activity and 'id="nic-table"' not in activity
    assert "52:54:00:aa:bb:cc" in activity and "ml/train-0" not in activity
    body = admin_client.get(f"/nics/?cluster={world.cluster.pk}", **HTMX, HTTP_HX_TARGET="nic-body")
    both = body.content.decode()
    assert "<html" not in both and 'id="nic-table"' in both and 'id="nic-activity"' in both
    assert "52:54:00:de:ad:00" not in both  # filtered to prod


def test_the_filters_select_by_cluster_and_state_and_name_what_is_wrong(
    admin_client: Client, world: World, nics: Nics
) -> None:
    failed = admin_client.get(f"/nics/?cluster={world.cluster.pk}&state=failed").context["rows"]
    assert [n.pod_name for n in failed] == ["web-1"]
    theirs = admin_client.get(f"/nics/?cluster={nics.theirs.cluster_id}").context
    assert [n.pod_name for n in theirs["rows"]] == ["their-pod"]
    assert [row.nic.mac for row in theirs["leaked"]] == ["52:54:00:de:ad:00"]
    bad = admin_client.get("/nics/?state=lost", **HTMX, HTTP_HX_TARGET="nic-table")
    assert bad.status_code == 400
    assert "state: Select a valid choice." in bad.content.decode()
    cursor = admin_client.get("/nics/?after=not-ours")
    assert (
        cursor.status_code == 400 and "start again from the first page" in cursor.content.decode()
    )


def test_the_nics_page_by_page_newest_first(admin_client: Client, world: World) -> None:
    for i in range(55):
        PodNicFactory(cluster=world.cluster, location=world.fresh, pod_name=f"p-{i:02}")
    first = admin_client.get("/nics/").context
    assert len(first["rows"]) == 50 and first["rows"][0].pod_name == "p-54"
    after = first["page"].next_cursor
    second = admin_client.get(f"/nics/?after={after}").context
    assert [n.pod_name for n in second["rows"]] == ["p-04", "p-03", "p-02", "p-01", "p-00"]


def test_a_viewer_sees_none_of_another_accounts_nics_and_is_refused_a_detach(
    member: Callable[[str], Client], world: World, nics: Nics
) -> None:
    viewer = member("viewer")
    page = viewer.get("/nics/")
    html = page.content.decode()
    assert {n.pod_name for n in page.context["rows"]} == {"train-0", "web-1", "web-2", "web-3"}
    assert [row.nic.mac for row in page.context["leaked"]] == ["52:54:00:aa:bb:cc"]
    assert "their-pod" not in html and "52:54:00:de:ad:00" not in html and "their-net" not in html
    assert "/detach/" not in html
    # Another account's cluster is no choice: naming it is refused, not answered.
    assert viewer.get(f"/nics/?cluster={nics.theirs.cluster_id}").status_code == 400
    # By name, another account's clusters are not among those it picks.
    assert viewer.get("/nics/?cluster__name=theirs").context["rows"] == []
    url = f"/nics/leaked/{nics.leaked.pk}/detach/"
    assert viewer.get(url).status_code == 403
    assert viewer.post(url, {"reason": "looks unused"}).status_code == 403
    nics.leaked.refresh_from_db()
    assert nics.leaked.detach_requested_at is None
    assert not AuditEvent.objects.filter(action="sriov.leaked_nic_detach_request").exists()
    # Another account's leaked NIC is not found at all.
    theirs = f"/nics/leaked/{nics.their_leak.pk}/detach/"
    assert member("operator").post(theirs, {"reason": "x"}).status_code == 404


def test_an_operators_detach_is_confirmed_with_a_reason_and_audited(
    member: Callable[[str], Client], world: World, nics: Nics
) -> None:
    operator = member("operator")
    url = f"/nics/leaked/{nics.leaked.pk}/detach/?next=/nics/%3Fcluster%3Dprod"
    page = operator.get("/nics/").content.decode()
    assert f"/nics/leaked/{nics.leaked.pk}/detach/" in page
    confirmation = operator.get(url)
    assert confirmation.status_code == 200 and 'name="reason"' in confirmation.content.decode()
    refused = operator.post(url, {"reason": " "})
    assert refused.status_code == 400
    nics.leaked.refresh_from_db()
    assert nics.leaked.detach_requested_at is None
    done = operator.post(url, {"reason": "pod deleted by hand", "next": "/nics/?cluster=prod"})
    assert done.status_code == 302 and done["Location"] == "/nics/?cluster=prod"
    nics.leaked.refresh_from_db()
    assert nics.leaked.detach_requested_at is not None
    assert nics.leaked.detach_reason == "pod deleted by hand"
    event = AuditEvent.objects.get(action="sriov.leaked_nic_detach_request")
    assert event.actor is not None and event.actor.pk == nics.leaked.detach_requested_by_id
    assert event.reason == "pod deleted by hand" and event.account_id == world.cluster.account_id
    # Asked for: shown as such, and not offered again.
    after = operator.get("/nics/", **HTMX, HTTP_HX_TARGET="nic-activity").content.decode()
    assert "pod deleted by hand" in after and f"/nics/leaked/{nics.leaked.pk}/detach/" not in after


def test_a_detach_through_htmx_answers_with_the_leaked_list_and_a_message(
    admin_client: Client, world: World, nics: Nics
) -> None:
    response = admin_client.post(
        f"/nics/leaked/{nics.leaked.pk}/detach/",
        {"reason": "no pod owns it", "next": "/nics/"},
        **HTMX,
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="nic-activity">')
    assert "Detach of NIC 52:54:00:aa:bb:cc asked for" in html
    assert 'id="action-panel" hx-swap-oob="true"' in html


def test_a_cluster_page_shows_its_sriov_card(
    member: Callable[[str], Client], world: World, nics: Nics
) -> None:
    page = member("viewer").get(f"/clusters/{world.cluster.pk}/")
    html = page.content.decode()
    assert 'id="sriov"' in html and "enabled" in html and "pods-net" in html
    counts = {state: n for state, n, _ in page.context["sriov_states"]}
    assert counts == {
        "requested": 1,
        "attaching": 1,
        "attached": 1,
        "detaching": 0,
        "released": 0,
        "failed": 1,
    }
    assert f"/nics/?cluster={world.cluster.pk}&amp;state=failed" in html
    SriovConfig.objects.filter(cluster=world.cluster).update(enabled=False)
    off = member("viewer").get(f"/clusters/{world.cluster.pk}/").content.decode()
    assert "not enabled" in off
