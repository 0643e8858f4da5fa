"""/api/v1/audit/: the audit log as the dashboard shows it, read only; a member reads the
events of their accounts only, filtered as the page filters, and a secret stays its mark."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from capvco_web.audit import SECRET_KEPT
from tests.factories import AccountFactory, AuditEventFactory, MembershipFactory

URL = "/api/v1/audit/"


@pytest.fixture
def member(db: None) -> APIClient:
    membership = MembershipFactory(role="viewer")
    client = APIClient()
    client.force_authenticate(membership.user)
    client.account = membership.account  # type: ignore[attr-defined]
    return client


def test_a_member_reads_their_accounts_events_and_no_others(member: APIClient) -> None:
    ours = AuditEventFactory(account=member.account)  # type: ignore[attr-defined]
    theirs = AuditEventFactory(account=AccountFactory())

    listed = [event["id"] for event in member.get(URL).json()["results"]]

    assert listed == [ours.pk]
    assert member.get(f"{URL}{theirs.pk}/").status_code == 404


def test_the_filters_are_the_pages_and_a_secret_stays_its_mark(api: APIClient) -> None:
    account = AccountFactory()
    machine = AuditEventFactory(
        account=account, action="machine.phase", object_type="clusters.Machine", object_id="7",
        before={"phase": "attaching"}, after={"phase": "running"},
    )  # fmt: skip
    AuditEventFactory(account=account, object_type="clusters.Machine", object_id="8")
    # A record written by hand or before its field was known to be a secret.
    AuditEventFactory(
        account=account, action="cluster.kubeconfig_set", object_type="clusters.Cluster",
        before={"kubeconfig": ""}, after={"kubeconfig": "apiVersion: v1\ntoken: abc", "n": 1},
    )  # fmt: skip

    found = api.get(URL, {"object_type": "clusters.Machine", "object_id": "7"}).json()
    (event,) = found["results"]
    assert (event["id"], event["action"]) == (machine.pk, "machine.phase")
    assert (event["before"], event["after"]) == ({"phase": "attaching"}, {"phase": "running"})
    (kubeconfig,) = api.get(URL, {"action": "cluster."}).json()["results"]
    assert kubeconfig["after"] == {"kubeconfig": SECRET_KEPT, "n": 1}
    assert kubeconfig["before"] == {"kubeconfig": ""}


def test_it_is_read_only_and_refuses_a_parameter_it_does_not_take(api: APIClient) -> None:
    event = AuditEventFactory()

    refused = api.get(URL, {"objekt": "x"})
    assert refused.status_code == 400
    assert refused.json()["unknown_parameters"] == ["objekt"]
    assert api.delete(f"{URL}{event.pk}/").status_code == 405
    assert api.post(URL, {}, format="json").status_code == 405


@pytest.mark.parametrize(
    ("since", "status"),
    [
        ("2026-12-05T10:00:00+21:18", 200),  # Python reads the offset, PostgreSQL would not
        ("0001-01-01T00:00:00+01:00", 400),  # before year 1 in UTC
    ],
)
def test_a_moment_far_from_utc_is_taken_in_utc_or_refused_by_the_api_and_the_page(
    api: APIClient, admin_client: Any, since: str, status: int
) -> None:
    AuditEventFactory()

    assert api.get(URL, {"since": since}).status_code == status
    assert admin_client.get("/audit/", {"since": since}).status_code == status
