"""Since when GPUs are idle (billing.idle): a spell per GPU node whose attached vGPUs no
pending or running pod requests, opened only from a complete Kubernetes observation,
ended when a pod asks for them; and the money pass that runs it with the rollups and the
leak ledger (billing.tasks)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from billing.idle import idle_record
from billing.models import CostRollup, IdleSpell, Leak, Rollup
from billing.tasks import billing_pass, leak_ledger_pass
from kube.models import KubePod
from tests.billing.test_costs import World, world_make
from tests.factories import KubePodFactory, LocationFactory, MembershipFactory, kube_observed_as

pytestmark = pytest.mark.django_db

D = Decimal
T0 = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)


@pytest.fixture
def world() -> World:
    world = world_make()
    kube_observed_as(world.cluster, complete=True)
    return world


def _writes(queries: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"] for q in queries.captured_queries
        if q["sql"].split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE")
    ]  # fmt: skip


def test_an_idle_gpu_node_opens_a_spell_once_and_a_second_pass_writes_nothing(
    world: World,
) -> None:
    first = idle_record(now=T0)
    with CaptureQueriesContext(connection) as queries:
        second = idle_record(now=T0 + timedelta(minutes=5))

    assert (first.opened, second.opened, second.changed, second.ended) == (2, 0, 0, 0)
    assert _writes(queries) == []
    spells = {
        s.node_name: (s.idle_gpus, s.hourly, s.currency, s.since) for s in IdleSpell.objects.all()
    }
    # node-0: 2 attached, 1 asked for: 1 idle at 1 EUR/h; node-4: 1 idle at 2 CHF/h.
    assert spells == {"node-0": (1, D("1"), "EUR", T0), "node-4": (1, D("2"), "CHF", T0)}
    # 3 h later node-4's spell cost 6 CHF.
    assert IdleSpell.objects.get(node_name="node-4").cost(until=T0 + timedelta(hours=3)) == 6


def test_a_pod_asking_for_the_gpus_ends_the_spell_and_keeps_since_when(world: World) -> None:
    idle_record(now=T0)
    KubePodFactory(cluster=world.cluster, node_name="node-4", namespace="train", gpu_requests=1)
    later = T0 + timedelta(hours=2)

    ended = idle_record(now=later)

    assert ended.ended == 1
    spell = IdleSpell.objects.get(node_name="node-4")
    assert (spell.since, spell.ended_at, spell.cost()) == (T0, later, D("4"))
    assert IdleSpell.objects.get(node_name="node-0").ended_at is None


def test_a_partial_kubernetes_observation_opens_no_spell(world: World) -> None:
    kube_observed_as(world.cluster, complete=False)
    # A pod the partial listing missed might ask for node-0's idle GPU.
    assert idle_record(now=T0).opened == 0
    assert not IdleSpell.objects.exists()


def test_a_finished_pod_leaves_its_gpus_idle_again_a_new_spell(world: World) -> None:
    pod = KubePodFactory(cluster=world.cluster, node_name="node-4", namespace="a", gpu_requests=1)
    idle_record(now=T0)
    KubePod.objects.filter(pk=pod.pk).update(phase=KubePod.Phase.SUCCEEDED)

    idle_record(now=T0 + timedelta(hours=1))

    assert IdleSpell.objects.get(node_name="node-4").since == T0 + timedelta(hours=1)


def test_the_money_passes_sample_the_hour_and_record_leaks_and_idle_gpus(world: World) -> None:
    billing_pass.apply()
    leak_ledger_pass.apply()
    with CaptureQueriesContext(connection) as queries:
        billing_pass.apply()
        leak_ledger_pass.apply()

    assert Rollup.objects.count() == 1
    assert CostRollup.objects.filter(kind=CostRollup.Kind.POOL).count() == 3
    # world_make's two orphans in nl-ams: a vGPU and a VM.
    assert sorted(Leak.objects.values_list("kind", flat=True)) == ["vgpu", "vm"]
    assert IdleSpell.objects.count() == 2
    assert _writes(queries) == []


def test_the_api_says_since_when_each_nodes_gpus_are_idle_to_the_accounts_members(
    world: World,
) -> None:
    idle_record(now=T0)
    KubePodFactory(cluster=world.cluster, node_name="node-4", namespace="a", gpu_requests=1)
    idle_record(now=T0 + timedelta(hours=2))
    api = APIClient()
    api.force_authenticate(MembershipFactory(account=world.account, role="viewer").user)

    idle_now = api.get("/api/v1/idle-gpus/", {"open": "true"}).json()["results"]
    ended = api.get("/api/v1/idle-gpus/", {"open": "false"}).json()["results"]
    csv = api.get("/api/v1/idle-gpus/", {"format": "csv"}).content.decode()
    api.force_authenticate(MembershipFactory(role="admin").user)  # of another account

    assert [(s["node_name"], s["idle_gpus"], s["since"], s["hourly"]) for s in idle_now] == [
        ("node-0", 1, "2026-12-01T10:05:00Z", "1.0000")
    ]
    # node-4 was idle 2 hours at 2 CHF an hour.
    assert [(s["node_name"], s["cost"], s["currency"]) for s in ended] == [
        ("node-4", "4.0000", "CHF")
    ]
    assert csv.splitlines()[0].startswith("id,account,account_name,location")
    assert len(csv.splitlines()) == 3
    assert api.get("/api/v1/idle-gpus/").json()["results"] == []


@pytest.mark.parametrize("name", ["cluster_id", "pool_id", "machine_id"])
def test_the_idle_gpus_are_filtered_by_whole_ids_only(world: World, name: str) -> None:
    idle_record(now=T0)
    api = APIClient()
    api.force_authenticate(MembershipFactory(account=world.account, role="viewer").user)
    spell = IdleSpell.objects.get(node_name="node-0")

    found = api.get("/api/v1/idle-gpus/", {name: getattr(spell, name)})
    refused = {value: api.get("/api/v1/idle-gpus/", {name: value}) for value in ("0.5", "1e3")}

    picked = found.json()["results"]
    assert "node-0" in [s["node_name"] for s in picked]
    assert {s[name] for s in picked} == {getattr(spell, name)}
    for value, response in refused.items():
        assert response.status_code == 400, (value, response.content)
        assert response.json()["fields"] == {name: ["Give an id (a whole number)."]}


def test_a_malformed_leak_row_stops_only_itself_and_the_pass_reports_it(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    # Another account's open VM leak whose VM id is no number (written by hand, or by an
    # older version): the ledger cannot decide how it ended.
    elsewhere = LocationFactory(observation_complete=True, observation_started_at=T0)
    bad = Leak.objects.create(
        account=elsewhere.account, location=elsewhere, kind=Leak.Kind.VM,
        external_id="not-a-vm-id", name="capvco-x", currency="EUR", monthly_price=D("1"),
        billed_since=T0, leaked_since=T0,
    )  # fmt: skip

    ledger = leak_ledger_pass.apply().get()
    money = billing_pass.apply().get()

    # The other rows and steps went on: world_make's two orphans opened, idle GPUs recorded.
    assert sorted(Leak.objects.exclude(pk=bad.pk).values_list("kind", flat=True)) == ["vgpu", "vm"]
    assert IdleSpell.objects.count() == 2
    assert Rollup.objects.count() == 1
    bad.refresh_from_db()
    assert bad.ended_at is None
    assert (ledger["opened"], money["failures"]) == (2, [])
    [failure] = ledger["failures"]
    assert failure.startswith(f"leak {bad.pk} (vm not-a-vm-id, {elsewhere.name}): ")
    assert any(
        record.levelname == "ERROR" and f"leak {bad.pk}" in record.getMessage()
        for record in caplog.records
    )
