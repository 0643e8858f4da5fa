"""One dispatcher applies every plan, and each pass that planned something is kept: what was
planned, what came of each step and why, how long planning and acting took. Act never
chooses: a machine step without the index or spec the plan must name is refused."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from rest_framework.test import APIClient

from capvco_web.models import PlanPass
from capvco_web.plans import Call, StepDropped, StepFailed, StepWaiting, plan_apply
from clusters.plan import MachineCreate, MachineProvision, VmReplace
from tests.factories import MembershipFactory
from tests.gpus.conftest import Plane

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Probe:
    """A step of any plan: the dispatcher knows only the protocol."""

    target: str
    raises: Exception | None = None
    blocked: str = ""
    kind: str = "probe"
    reason: str = "a test"

    def describe(self) -> str:
        return f"{self.kind} {self.target}"

    def calls(self) -> tuple[Call, ...]:
        return (Call("GET", f"/{self.target}", service="kubernetes"),)


def test_the_dispatcher_sorts_each_outcome_and_acts_on_no_blocked_step() -> None:
    acted: list[str] = []
    recorded: list[str] = []

    def act(step: object) -> None:
        assert isinstance(step, Probe)
        acted.append(step.target)
        if step.raises is not None:
            raise step.raises

    steps = [
        Probe("a"),
        Probe("b", StepDropped("changed since the plan")),
        Probe("c", StepWaiting("in flight")),
        Probe("d", StepFailed("refused")),
        Probe("e", blocked="no card"),
        Probe("f", KeyError("boom")),
    ]
    record = plan_apply(
        steps[:5], act, scope="cluster", scope_id=1, plan_ms=3,
        on_blocked=lambda step: recorded.append(step.target),
    )  # fmt: skip

    assert [(o.target, o.outcome, o.message) for o in record.outcomes] == [
        ("a", "ran", ""),
        ("b", "dropped", "changed since the plan"),
        ("c", "waiting", "in flight"),
        ("d", "failed", "refused"),
        ("e", "blocked", "no card"),
    ]
    assert acted == ["a", "b", "c", "d"] and recorded == ["e"]
    assert record.plan_ms == 3
    # An exception the caller did not name as a failure is a bug: it is not swallowed.
    with pytest.raises(KeyError):
        plan_apply(steps[5:], act, scope="cluster", scope_id=1)
    # The caller's own failures are failed steps.
    failed = plan_apply(steps[5:], act, scope="cluster", scope_id=1, failures=(KeyError,))
    assert [o.outcome for o in failed.outcomes] == ["failed"]


def test_a_dry_run_lists_the_calls_and_acts_on_nothing() -> None:
    def act(step: object) -> None:
        raise AssertionError("acted")

    record = plan_apply([Probe("a"), Probe("b")], act, scope="cluster", scope_id=1, dry_run=True)
    assert [o.outcome for o in record.outcomes] == ["planned", "planned"]
    assert [str(c) for c in record.calls] == ["kubernetes GET /a", "kubernetes GET /b"]
    record.save()
    assert not PlanPass.objects.exists()  # a dry run is not a pass


NOW = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("step", "missing", "fields"),
    [
        (MachineCreate, "spec", {"index": 0}),
        (MachineProvision, "spec", {"machine_id": 1, "seen": NOW}),
        (VmReplace, "spec", {"machine_id": 1, "seen": NOW}),
    ],
)
def test_a_machine_step_without_the_plans_index_or_spec_is_refused(
    step: type[MachineCreate | MachineProvision], missing: str, fields: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match=f"the plan names no {missing}"):
        step(
            target="a100-0", reason="test", cluster_id=1, pool_id=1, vm_name="v", spec=(), **fields
        )


def test_a_create_without_the_plans_index_cannot_be_made() -> None:
    with pytest.raises(TypeError, match="index"):
        MachineCreate(  # type: ignore[call-arg]
            target="a100-0",
            reason="test",
            cluster_id=1,
            pool_id=1,
            vm_name="v",
            spec=(("vcpus", 2),),
        )


def test_each_pass_is_recorded_and_only_the_last_are_kept(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "cpu", replicas=2)
    plane.observe()
    with override_settings(PLAN_PASSES_KEPT=2):
        first = plane.reconcile(cluster)
        row = PlanPass.objects.get()
        assert (row.scope, row.scope_id) == ("cluster", cluster.pk)
        assert [(s["kind"], s["target"]) for s in row.planned] == [
            ("create", "cpu-0"),
            ("create", "cpu-1"),
        ]
        assert [(o["target"], o["outcome"]) for o in row.outcomes] == [
            ("cpu-0", "ran"),
            ("cpu-1", "ran"),
        ]
        assert first.record is not None and row.act_ms == first.record.act_ms
        # Another scope's passes neither count nor go.
        plan_apply([Probe("x")], lambda step: None, scope="location", scope_id=cluster.pk).save()
        for n in range(2):
            plan_apply(
                [Probe(f"p{n}")], lambda step: None, scope="cluster", scope_id=cluster.pk
            ).save()
        kept = list(PlanPass.objects.filter(scope="cluster", scope_id=cluster.pk))
    assert [p.planned[0]["target"] for p in kept] == ["p1", "p0"]  # newest first
    assert PlanPass.objects.filter(scope="location").count() == 1


def test_the_api_and_the_cluster_page_show_the_last_passes_newest_first(
    plane: Plane, admin_client: Client
) -> None:
    cluster = plane.cluster()
    pool = plane.pool(cluster, "cpu", replicas=1)
    plane.observe()
    plane.reconcile(cluster)
    pool.replicas = 0
    pool.save()
    plane.observe()
    plane.reconcile(cluster)
    viewer = User.objects.create_user("viewer", password="pw")
    MembershipFactory(user=viewer, account=plane.account, role="viewer")
    api = APIClient()
    api.force_authenticate(viewer)

    passes = api.get(f"/api/v1/clusters/{cluster.pk}/passes/").json()

    assert [[s["kind"] for s in p["planned"]] for p in passes] == [["teardown"], ["create"]]
    assert passes[1]["outcomes"] == [
        {"kind": "create", "target": "cpu-0", "outcome": "ran", "message": ""}
    ]
    assert {"plan_ms", "act_ms", "started_at", "scope"} <= passes[0].keys()
    stranger = User.objects.create_user("stranger", password="pw")
    MembershipFactory(user=stranger, role="admin")  # of an account of its own
    api.force_authenticate(stranger)
    assert api.get(f"/api/v1/clusters/{cluster.pk}/passes/").status_code == 404
    page = admin_client.get(f"/clusters/{cluster.pk}/").content.decode()
    assert "Last passes" in page and "teardown cpu-0" in page
