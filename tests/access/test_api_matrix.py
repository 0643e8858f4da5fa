"""Who may do what through the API: every role, every endpoint, their own account or
another one.

* Another account's object is not found (404), whatever the role: the API does not tell
  that it exists. Creating under another account's object is refused as for an id that
  exists nowhere (409, an object named that does not exist).
* In their own account, a role that may not do the action is refused (403).
* A superuser may do everything everywhere.
* A refusal writes nothing (no audit record); a write that is allowed is audited.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from rest_framework.test import APIClient

from capvco_web.models import AuditEvent
from tests.access.conftest import (
    CALLERS,
    LEVEL,
    Tenant,
    World,
    caller_make,
    newcomer_known_to_admins_of,
)
from tests.factories import JWT


@dataclass
class Case:
    """One endpoint: the role it needs (1 viewer, 2 operator, 3 admin) and its answer when
    allowed. `creates`: a POST to a list, under an object of the tenant."""

    name: str
    method: str
    url: Callable[[Tenant], str]
    level: int
    allowed: int
    body: Callable[[Tenant], dict[str, Any]] = field(default=lambda t: {})
    creates: bool = False
    writes: bool = True


REASON = {"reason": "as asked in the ticket"}
MANAGEMENT_KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: mgmt
contexts: [{name: mgmt, context: {cluster: mgmt, user: capi}}]
clusters: [{name: mgmt, cluster: {server: "https://mgmt.example:6443"}}]
users: [{name: capi, user: {token: t0ken}}]
"""


def _reads(name: str, url: Callable[[Tenant], str]) -> Case:
    return Case(name, "get", url, level=1, allowed=200, writes=False)


CASES = [
    # accounts
    _reads("account retrieve", lambda t: f"/api/v1/accounts/{t.account.pk}/"),
    Case(
        "account update",
        "patch",
        lambda t: f"/api/v1/accounts/{t.account.pk}/",
        level=3,
        allowed=200,
        body=lambda t: {"orphan_confirmations": 5},
    ),
    Case(
        "account management kubeconfig set",
        "put",
        lambda t: f"/api/v1/accounts/{t.account.pk}/capi-kubeconfig/",
        level=3,
        allowed=204,
        body=lambda t: {"kubeconfig": MANAGEMENT_KUBECONFIG, **REASON},
    ),
    Case(
        "account management kubeconfig remove",
        "delete",
        lambda t: f"/api/v1/accounts/{t.account.pk}/capi-kubeconfig/",
        level=3,
        allowed=204,
        body=lambda t: REASON,
    ),
    Case(
        "account delete (still has a cluster)",
        "delete",
        lambda t: f"/api/v1/accounts/{t.account.pk}/",
        level=3,
        allowed=409,
        writes=False,
    ),
    _reads("location retrieve", lambda t: f"/api/v1/locations/{t.location.pk}/"),
    _reads("location plan", lambda t: f"/api/v1/locations/{t.location.pk}/plan/"),
    # clusters
    _reads("cluster retrieve", lambda t: f"/api/v1/clusters/{t.cluster.pk}/"),
    _reads("cluster plan", lambda t: f"/api/v1/clusters/{t.cluster.pk}/plan/"),
    Case(
        "cluster create",
        "post",
        lambda t: "/api/v1/clusters/",
        level=3,
        allowed=201,
        body=lambda t: {"name": f"fresh{t.account.pk}", "account": t.account.pk},
        creates=True,
    ),
    Case(
        "cluster gpu add-on",
        "put",
        lambda t: f"/api/v1/clusters/{t.cluster.pk}/gpu-addon/",
        level=3,
        allowed=200,
        body=lambda t: {"enabled": True, **REASON},
    ),
    Case(
        "cluster delete",
        "delete",
        lambda t: f"/api/v1/clusters/{t.cluster.pk}/",
        level=2,
        allowed=202,
        body=lambda t: {**REASON, "confirm": t.cluster.name},
    ),
    # sites
    _reads("site retrieve", lambda t: f"/api/v1/sites/{t.site.pk}/"),
    Case(
        "site create",
        "post",
        lambda t: "/api/v1/sites/",
        level=3,
        allowed=201,
        body=lambda t: {
            "cluster": t.cluster.pk,
            "location": t.spare_location.pk,
            "cloudspace_id": "cs-new",
            "image_id": 7,
        },
        creates=True,
    ),
    Case(
        "site update",
        "patch",
        lambda t: f"/api/v1/sites/{t.site.pk}/",
        level=3,
        allowed=200,
        body=lambda t: {"image_id": 42},
    ),
    Case(
        "site delete",
        "delete",
        lambda t: f"/api/v1/sites/{t.empty_site.pk}/",
        level=3,
        allowed=204,
        body=lambda t: REASON,
    ),
    # pools
    _reads("pool retrieve", lambda t: f"/api/v1/pools/{t.pool.pk}/"),
    Case(
        "pool create",
        "post",
        lambda t: "/api/v1/pools/",
        level=3,
        allowed=201,
        body=lambda t: {"cluster": t.cluster.pk, "site": t.site.pk, "name": "new", "replicas": 0},
        creates=True,
    ),
    Case(
        "pool update",
        "patch",
        lambda t: f"/api/v1/pools/{t.pool.pk}/",
        level=3,
        allowed=200,
        body=lambda t: {"user_data": "#cloud-config"},
    ),
    Case(
        "pool scale",
        "post",
        lambda t: f"/api/v1/pools/{t.pool.pk}/scale/",
        level=2,
        allowed=200,
        body=lambda t: {"replicas": 3, **REASON},
    ),
    Case(
        "pool delete",
        "delete",
        lambda t: f"/api/v1/pools/{t.empty_pool.pk}/",
        level=3,
        allowed=204,
        body=lambda t: REASON,
    ),
    # machines
    _reads("machine retrieve", lambda t: f"/api/v1/machines/{t.machine.pk}/"),
    Case(
        "machine delete",
        "delete",
        lambda t: f"/api/v1/machines/{t.machine.pk}/",
        level=2,
        allowed=202,
        body=lambda t: REASON,
    ),
    Case(
        "machine force delete",
        "post",
        lambda t: f"/api/v1/machines/{t.machine.pk}/force-delete/",
        level=2,
        allowed=204,
        body=lambda t: {**REASON, "confirm": t.machine.name},
    ),
    # GPUs
    _reads("gpu profile retrieve", lambda t: f"/api/v1/gpu-profiles/{t.card.pk}/"),
    _reads("reservation retrieve", lambda t: f"/api/v1/reservations/{t.reservation.pk}/"),
    Case(
        "reservation release",
        "post",
        lambda t: f"/api/v1/reservations/{t.reservation.pk}/release/",
        level=2,
        allowed=202,
        body=lambda t: REASON,
    ),
    # memberships
    _reads("membership retrieve", lambda t: f"/api/v1/memberships/{t.membership.pk}/"),
    Case(
        "membership create",
        "post",
        lambda t: "/api/v1/memberships/",
        level=3,
        allowed=201,
        body=lambda t: {
            "user": newcomer_known_to_admins_of(t.account).username,
            "account": t.account.pk,
            "role": "operator",
        },
        creates=True,
    ),
    Case(
        "membership update",
        "patch",
        lambda t: f"/api/v1/memberships/{t.membership.pk}/",
        level=3,
        allowed=200,
        body=lambda t: {"role": "admin"},
    ),
    Case(
        "membership delete",
        "delete",
        lambda t: f"/api/v1/memberships/{t.membership.pk}/",
        level=3,
        allowed=204,
    ),
]


def expected(case: Case, caller: str, scope: str) -> int:
    if caller == "superuser":
        return case.allowed
    may = LEVEL[caller] >= case.level
    if case.creates:
        # Refused up front without the role anywhere; with it, another account's object
        # is one that does not exist.
        if not may:
            return 403
        return case.allowed if scope == "own" else 409
    if scope == "other" or caller == "none":
        return 404
    return case.allowed if may else 403


@pytest.mark.parametrize("scope", ["own", "other"])
@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_role_decides_what_the_api_allows(
    world: World, case: Case, caller: str, scope: str
) -> None:
    api = APIClient()
    api.force_login(caller_make(caller, world))
    tenant = world.own if scope == "own" else world.other
    audited = AuditEvent.objects.count()

    response = getattr(api, case.method)(case.url(tenant), case.body(tenant), format="json")

    want = expected(case, caller, scope)
    assert response.status_code == want, response.content
    if want == case.allowed and case.writes:
        assert AuditEvent.objects.count() > audited
    else:
        assert AuditEvent.objects.count() == audited


def test_creating_an_account_takes_the_global_permission(world: World) -> None:
    body = {
        "name": "new", "api_url": "https://vco.example/api/1", "iam_url": "https://iam.example",
        "customer_id": "c-new", "credential": JWT,
    }  # fmt: skip
    for caller in ["none", "viewer", "operator", "admin"]:
        api = APIClient()
        api.force_login(caller_make(caller, world))
        assert api.post("/api/v1/accounts/", body, format="json").status_code == 403
    api = APIClient()
    api.force_login(caller_make("superuser", world))
    assert api.post("/api/v1/accounts/", body, format="json").status_code == 201


LISTS = {
    "accounts": lambda t: [t.account.pk],
    "locations": lambda t: [t.location.pk, t.spare_location.pk, t.empty_site.location_id],
    "clusters": lambda t: [t.cluster.pk],
    "sites": lambda t: [t.site.pk, t.empty_site.pk],
    "pools": lambda t: [t.pool.pk, t.empty_pool.pk],
    "machines": lambda t: [t.machine.pk],
    "gpu-profiles": lambda t: [t.card.pk],
    "reservations": lambda t: [t.reservation.pk],
    "memberships": lambda t: [t.membership.pk],
}


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("endpoint", list(LISTS))
def test_lists_hold_the_objects_of_the_callers_accounts_only(
    world: World, endpoint: str, caller: str
) -> None:
    user = caller_make(caller, world)
    api = APIClient()
    api.force_login(user)

    response = api.get(f"/api/v1/{endpoint}/")

    assert response.status_code == 200
    listed = {row["id"] for row in response.json()["results"]}
    own, other = set(LISTS[endpoint](world.own)), set(LISTS[endpoint](world.other))
    if endpoint == "memberships" and caller in LEVEL and caller != "none":
        own |= set(user.memberships.values_list("pk", flat=True))
    if caller == "superuser":
        assert listed >= own | other
    elif caller == "none":
        assert listed == set()
    else:
        assert listed == own


def test_gpu_types_are_those_of_the_callers_accounts(world: World) -> None:
    api = APIClient()
    api.force_login(caller_make("viewer", world))
    rows = api.get("/api/v1/gpu-types/").json()
    assert {row["location"] for row in rows} == {world.own.location.name}


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("group_by", ["account", "location", "cluster", "pool", "namespace"])
def test_costs_are_those_of_the_callers_accounts(world: World, caller: str, group_by: str) -> None:
    api = APIClient()
    api.force_login(caller_make(caller, world))
    response = api.get("/api/v1/costs/", {"group_by": group_by})
    assert response.status_code == 200
    accounts = {row["account"] for row in response.json()}
    own, other = world.own.account.pk, world.other.account.pk
    if group_by == "namespace":  # no pod asks for a GPU in this world: no row
        assert accounts == set()
    elif caller == "superuser":
        assert accounts >= {own, other}
    elif caller == "none":
        assert accounts == set()
    else:
        assert accounts == {own}
    response = api.get("/api/v1/costs/", {"account": other})
    assert (response.status_code, caller == "superuser" or response.json() == []) == (200, True)


def test_a_filter_by_another_accounts_object_lists_nothing(world: World) -> None:
    api = APIClient()
    api.force_login(caller_make("admin", world))
    other = world.other.cluster
    for url, query in [
        ("/api/v1/machines/", {"cluster__name": other.name}),
        ("/api/v1/machines/", {"cluster": other.pk}),
        ("/api/v1/clusters/", {"account": other.account_id}),
        ("/api/v1/pools/", {"cluster": other.pk}),
    ]:
        response = api.get(url, query)
        assert (response.status_code, response.json()["results"]) == (200, []), url
