"""Who sees what, by role in each account (capvco_web.permissions): a member sees their
accounts' rows and nothing of the others (not listed; a page of one is not found); a viewer
is offered no action, an operator the operator's ones; a superuser sees everything. The
readiness details are for staff, as on /readyz."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.test import Client

from capvco_web.models import AuditEvent, Heartbeat
from clusters.models import Cluster
from gpus.models import VgpuReservation
from tests.dashboard.conftest import World
from tests.factories import (
    AccountFactory,
    AuditEventFactory,
    ClusterFactory,
    ClusterSiteFactory,
    GpuProfileFactory,
    LocationFactory,
    MachinePoolFactory,
    UserFactory,
    VgpuReservationFactory,
)

pytestmark = pytest.mark.django_db

ACTION_PATHS = ["/release/", "/scale/", "/delete/", "/force-delete/"]


@dataclass
class Elsewhere:
    """Another account's cluster, orphan and audit event."""

    cluster: Cluster
    orphan: VgpuReservation
    event: AuditEvent


@pytest.fixture
def elsewhere(world: World) -> Elsewhere:
    account = AccountFactory(name="globex")
    location = LocationFactory(account=account, name="de-other-dc01")
    GpuProfileFactory(location=location, profile_id="card-h100", model="H100")
    cluster = ClusterFactory(account=account, name="theirs")
    MachinePoolFactory(site=ClusterSiteFactory(cluster=cluster, location=location), name="gpu")
    orphan = VgpuReservationFactory(
        orphaned=True, location=location, name="capvco-theirs-gpu-1-gpu-0", gpu_id="card-h100"
    )
    event = AuditEventFactory(account=account, object_repr="theirs-event")
    return Elsewhere(cluster, orphan, event)


def _listed(client: Client) -> dict[str, set[str]]:
    overview = client.get("/")
    assert overview.status_code == 200
    return {
        "locations": {row.location.name for row in overview.context["board"]},
        "reservations": {
            row.reservation.name for row in client.get("/reservations/").context["rows"]
        },
        "clusters": {s.cluster.name for s in client.get("/clusters/").context["summaries"]},
        "events": {row.event.object_repr for row in client.get("/audit/").context["rows"]},
        "csv": set(
            b"".join(client.get("/reservations/csv/").streaming_content).decode().splitlines()[1:]  # type: ignore[attr-defined]
        ),
    }


def test_a_viewer_sees_their_accounts_rows_and_nothing_of_another(
    member: Callable[[str], Client], world: World, elsewhere: Elsewhere
) -> None:
    AuditEventFactory(account=world.cluster.account, object_repr="ours-event")
    viewer = member("viewer")
    listed = _listed(viewer)
    assert listed["locations"] == {world.fresh.name, world.stale.name}
    assert world.orphan.name in listed["reservations"]
    assert elsewhere.orphan.name not in listed["reservations"]
    assert listed["clusters"] == {"prod"}
    assert listed["events"] == {"ours-event"}
    assert any(world.orphan.name in line for line in listed["csv"])
    assert not any(elsewhere.orphan.name in line for line in listed["csv"])
    assert viewer.get(f"/clusters/{world.cluster.pk}/").status_code == 200
    assert viewer.get(f"/clusters/{elsewhere.cluster.pk}/").status_code == 404


def test_a_viewer_is_offered_no_action(member: Callable[[str], Client], world: World) -> None:
    viewer = member("viewer")
    pages = [
        viewer.get("/reservations/").content.decode(),
        viewer.get(f"/clusters/{world.cluster.pk}/").content.decode(),
        viewer.get("/clusters/").content.decode(),
    ]
    for page in pages:
        assert not any(path in page for path in ACTION_PATHS)
        assert "/clusters/new/" not in page


def test_an_operator_is_offered_the_operators_actions_and_not_a_new_cluster(
    member: Callable[[str], Client], world: World
) -> None:
    operator = member("operator")
    reservations = operator.get("/reservations/").content.decode()
    assert f"/reservations/{world.orphan.pk}/release/" in reservations
    cluster = operator.get(f"/clusters/{world.cluster.pk}/").content.decode()
    for path in [
        f"/pools/{world.pool.pk}/scale/",
        f"/machines/{world.machines[0].pk}/delete/",
        f"/machines/{world.machines[0].pk}/force-delete/",
        f"/clusters/{world.cluster.pk}/delete/",
    ]:
        assert path in cluster
    assert "/clusters/new/" not in operator.get("/clusters/").content.decode()


def test_an_admin_of_the_account_is_offered_a_new_cluster(
    member: Callable[[str], Client], world: World
) -> None:
    assert "/clusters/new/" in member("admin").get("/clusters/").content.decode()


def test_a_user_without_a_role_sees_empty_pages(logged_in_client: Client, world: World) -> None:
    AuditEventFactory(account=world.cluster.account)
    listed = _listed(logged_in_client)
    assert listed == {
        "locations": set(),
        "reservations": set(),
        "clusters": set(),
        "events": set(),
        "csv": set(),
    }
    overview = logged_in_client.get("/").context
    assert all(kind.count == 0 for kind in overview["waste"])
    assert overview["observations"] == [] and overview["failed"] == []
    assert logged_in_client.get(f"/clusters/{world.cluster.pk}/").status_code == 404


def test_a_superuser_sees_every_account_and_is_offered_each_action(
    admin_client: Client, world: World, elsewhere: Elsewhere
) -> None:
    listed = _listed(admin_client)
    assert {world.fresh.name, "de-other-dc01"} <= listed["locations"]
    assert {world.orphan.name, elsewhere.orphan.name} <= listed["reservations"]
    assert listed["clusters"] == {"prod", "theirs"}
    assert "theirs-event" in listed["events"]
    reservations = admin_client.get("/reservations/").content.decode()
    assert f"/reservations/{elsewhere.orphan.pk}/release/" in reservations
    # A machine's GPU goes with its machine: no release offered.
    assert f"/reservations/{world.attached[0].pk}/release/" not in reservations
    cluster = admin_client.get(f"/clusters/{elsewhere.cluster.pk}/").content.decode()
    assert f"/clusters/{elsewhere.cluster.pk}/delete/" in cluster


def test_the_readiness_details_are_for_staff(client: Client, world: World) -> None:
    Heartbeat.objects.all().delete()  # beat never ticked: a failing check, with its why
    member = UserFactory()
    client.force_login(member)
    plain = client.get("/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="system-status")
    body = plain.content.decode()
    assert 'id="system-status"' in body and "Unavailable" in body
    assert "no beat tick recorded yet" not in body and "broker" not in body

    member.is_staff = True
    member.save()
    staff = client.get("/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="system-status")
    assert "no beat tick recorded yet" in staff.content.decode()
