"""Pools follow their GPU pods: up from pending pods (from zero, the cheapest location with
room), nothing for pods that wait on something else, a shortfall told once, down after idle
through cordon and evictions that honour PodDisruptionBudgets, a node kept when a pod
wants it again, nothing from a partial listing, nothing twice."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from autoscale.models import GpuShortfall
from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from cloud.whitesky import whitesky_client
from clusters.models import Machine, MachineDrain, MachinePool
from notify.models import Notice, WebhookTarget
from notify.services import notices_reconcile
from tests.autoscale.conftest import A100, BE, NL, Autoscaled, kinds, later
from tests.kube_sim import node_object
from tests.test_one_writer import TESTS, writers


def test_a_pending_a100_pod_grows_a_pool_from_zero_and_a_second_pass_decides_nothing(
    scaled: Autoscaled,
) -> None:
    pool = scaled.pool("a100", BE)
    scaled.pod("train", gpus=1, gpu_type=A100)
    scaled.observe()

    first = scaled.autoscale()

    assert kinds(first) == ["pool_grow"]
    assert "from 0 to 1 machines" in first.steps[0].describe()
    pool = MachinePool.objects.select_related("target").get(pk=pool.pk)
    assert (pool.replicas, pool.effective_replicas) == (0, 1)  # people's replicas untouched
    event = AuditEvent.objects.get(action="pool.autoscale")
    assert (event.actor_name, event.before, event.after) == (
        SystemActor.AUTOSCALER.value,
        {"replicas": 0},
        {"replicas": 1},
    )
    # Nothing changed: the machine decided is coming, so the next pass decides nothing.
    scaled.observe()
    assert kinds(scaled.autoscale()) == []
    scaled.converge()
    (machine,) = Machine.objects.filter(pool=pool)
    assert machine.phase == Machine.Phase.RUNNING
    assert len(scaled.plane.sim_vgpus(f"capvco-demo-{machine.name}-")) == 1
    scaled.observe()
    assert kinds(scaled.autoscale()) == []  # made, its node not joined yet: still coming


def test_two_types_in_two_locations_each_pod_grows_the_cheapest_pool_of_its_type(
    scaled: Autoscaled,
) -> None:
    nl = scaled.pool("a100-nl", NL)
    be = scaled.pool("a100-be", BE)  # whitesky's prices: be is the cheaper
    t4 = scaled.pool("t4", BE, gpu_type="NVIDIA T4")
    scaled.pod("train", gpus=1, gpu_type=A100)
    scaled.pod("infer", gpus=1, gpu_type="nvidia-t4")
    scaled.observe()

    record = scaled.autoscale()

    grown = {step.target: step.describe() for step in record.steps}
    assert set(grown) == {"pool a100-be", "pool t4"}
    effective = {p.name: p.effective_replicas for p in MachinePool.objects.all()}
    assert effective == {nl.name: 0, be.name: 1, t4.name: 1}


def test_pods_are_packed_first_fit_decreasing_onto_machines_of_the_pools_gpu_count(
    scaled: Autoscaled,
) -> None:
    scaled.pool("a100x4", BE, gpu_count=4)
    for name, gpus in [("a", 1), ("b", 3), ("c", 2), ("d", 2)]:
        scaled.pod(name, gpus=gpus, gpu_type=A100)
    scaled.observe()

    (grow,) = scaled.autoscale().steps

    assert grow.describe().startswith("grow pool a100x4 from 0 to 2 machines")  # 3+1, 2+2


def test_a_pod_waiting_on_something_other_than_gpus_scales_nothing(
    scaled: Autoscaled,
) -> None:
    pool = scaled.pool("a100", NL, replicas=1, autoscale_min=1)
    scaled.converge()
    (machine,) = Machine.objects.filter(pool=pool)
    node = scaled.node_of(machine)
    scaled.pod("busy", gpus=0, node=node)  # holds no GPU: the node's GPU is free
    scaled.pod("picky", gpus=1, gpu_type=A100)  # waits on CPU, a taint or affinity
    scaled.observe()

    record = scaled.autoscale()

    assert "pool_grow" not in kinds(record)
    assert MachinePool.objects.get(pk=pool.pk).effective_replicas == 1


def test_no_capacity_anywhere_is_one_shortfall_told_once_and_ends_when_it_ends(
    scaled: Autoscaled, admin_client: Any
) -> None:
    scaled.pool("a100-nl", NL)
    scaled.pool("a100-be", BE)
    _fill_every_a100_card(scaled)
    WebhookTarget.objects.create(
        account=scaled.plane.account, name="ops", url="https://hooks.example.com/x"
    )
    scaled.pod("train", gpus=2, gpu_type=A100, labels={})
    scaled.pod("train-2", gpus=2, gpu_type=A100)
    scaled.observe()

    record = scaled.autoscale()

    assert kinds(record) == []
    (shortfall,) = GpuShortfall.objects.all()
    assert shortfall.text == (
        "nvidia-a100 x 2: 2 pods pending: pool a100-be makes 1 per machine, "
        "pool a100-nl makes 1 per machine"
    )
    MachinePool.objects.update(gpu_count=2)
    scaled.autoscale()
    (shortfall,) = GpuShortfall.objects.all()
    assert shortfall.text == (f"nvidia-a100 x 2: 2 pods pending: {BE} 0 free, {NL} 0 free")
    told = Notice.objects.filter(reason="gpu_no_capacity")
    notices_reconcile(now=later(0))
    notices_reconcile(now=later(0))
    (notice,) = told  # told once
    assert f"{BE} 0 free" in notice.summary
    pending = admin_client.get(reverse("dashboard:pending-pods")).content.decode()
    assert pending.count(f"no autoscaled pool can grow: {shortfall.text}") == 2  # each pod
    scaled.autoscale()
    assert told.count() == 1  # a pass with nothing changed: the same shortfall
    for name in ("train", "train-2"):
        scaled.api.delete_namespaced_pod(name, "default")
    scaled.observe()
    scaled.autoscale()
    assert not GpuShortfall.objects.exists()
    notices_reconcile(now=later(1))
    assert told.get().closed_at is not None


def _fill_every_a100_card(scaled: Autoscaled) -> None:
    """Someone else's reservations take every A100 instance of both locations."""
    with whitesky_client(scaled.plane.account) as client:
        for location in (NL, BE):
            for card in client.list_gpu_profiles(location=location):
                if card.base_model != "A100":
                    continue
                for n in range(card.available_instances):
                    client.reserve_vgpu(location=location, gpu_id=card.id, name=f"x-{card.id}-{n}")
    scaled.plane.observe()


def _idle_machine(scaled: Autoscaled) -> tuple[MachinePool, Machine, str]:
    """A pool of one running machine whose node joined and whose GPU no pod requests,
    with a pod of a web server and a DaemonSet's pod on it, unneeded from now."""
    pool = scaled.pool("a100", NL, replicas=1)
    scaled.converge()
    (machine,) = Machine.objects.filter(pool=pool)
    node = scaled.node_of(machine)
    scaled.pod("web", node=node)
    daemon = scaled.pod("agent-x1", node=node)
    daemon["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u-1"}
    ]
    scaled.kube.put("demo", daemon)
    scaled.observe()
    assert kinds(scaled.autoscale()) == ["machine_unneeded"]
    scaled.observe()  # a listing begun after the idle clock started
    return pool, machine, node


def idle_for(scaled: Autoscaled, minutes: float) -> None:
    """As if the idle clocks had started `minutes` ago; then a listing."""
    MachineDrain.objects.update(unneeded_since=later(-minutes))
    scaled.observe()


def _budget(scaled: Autoscaled, **spec: Any) -> None:
    scaled.kube.put(
        "demo",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
        },
    )


def test_an_idle_machine_is_drained_past_a_refusing_budget_and_torn_down(
    scaled: Autoscaled,
) -> None:
    pool, machine, node = _idle_machine(scaled)
    _budget(scaled, minAvailable=1)
    idle_for(scaled, 5)
    assert kinds(scaled.autoscale()) == []  # not idle long enough
    idle_for(scaled, 11)

    drain = scaled.autoscale()

    assert [(o.kind, o.outcome) for o in drain.outcomes] == [("node_drain", "waiting")]
    assert "budgets of default/web allow no eviction" in drain.outcomes[0].message
    assert scaled.cordoned(node)
    scaled.observe()
    refused = scaled.autoscale()
    assert [(o.kind, o.outcome) for o in refused.outcomes] == [("pod_evict", "waiting")]
    assert "disruption budget" in refused.outcomes[0].message
    assert "web" in scaled.pods()  # a 429 means wait, never delete

    _budget(scaled, maxUnavailable=1)
    assert [o.outcome for o in scaled.autoscale().outcomes] == ["ran"]
    assert scaled.pods() == {"agent-x1"}  # the DaemonSet's pod stays, as kubectl drain
    scaled.observe()
    released = scaled.autoscale()
    assert kinds(released) == ["machine_release"]
    assert MachinePool.objects.get(pk=pool.pk).effective_replicas == 0
    scaled.converge()
    assert not Machine.objects.filter(pk=machine.pk).exists()
    assert scaled.plane.sim_vgpus("capvco-demo-a100-") == []  # every vGPU released


def test_a_pod_that_wants_the_gpus_of_a_draining_node_keeps_it(scaled: Autoscaled) -> None:
    pool, machine, node = _idle_machine(scaled)
    _budget(scaled, minAvailable=1)  # the drain waits on the web pod's budget
    idle_for(scaled, 11)
    scaled.autoscale()
    assert scaled.cordoned(node)
    scaled.pod("late", gpus=1, gpu_type=A100)
    scaled.observe()

    record = scaled.autoscale()

    assert kinds(record)[0] == "machine_keep"
    assert "pool_grow" not in kinds(record)  # the kept node takes it, no new machine
    assert not scaled.cordoned(node)
    assert not MachineDrain.objects.filter(machine=machine).exists()
    assert MachinePool.objects.get(pk=pool.pk).effective_replicas == 1
    assert AuditEvent.objects.filter(action="machine.keep").count() == 1


def test_a_partial_listing_never_scales_down(scaled: Autoscaled) -> None:
    _, machine, node = _idle_machine(scaled)
    scaled.kube.fault(operation="list pods", status=503)
    scaled.observe()  # the pods' listing fails: it may hide the pods on the node
    idle_for(scaled, 30)

    record = scaled.autoscale()

    assert kinds(record) == []
    assert not scaled.cordoned(node)
    assert MachineDrain.objects.get(machine=machine).phase == MachineDrain.Phase.UNNEEDED


def test_a_pool_never_goes_below_its_min(scaled: Autoscaled) -> None:
    pool, _, node = _idle_machine(scaled)
    MachinePool.objects.filter(pk=pool.pk).update(autoscale_min=1)
    idle_for(scaled, 30)

    assert kinds(scaled.autoscale()) == []
    assert not scaled.cordoned(node)


def test_cpu_nodes_are_never_the_autoscalers(scaled: Autoscaled) -> None:
    scaled.kube.put("demo", node_object("cpu-1"))
    scaled.pool("a100", NL)
    scaled.observe()
    assert kinds(scaled.autoscale()) == []


def test_the_autoscalers_rows_have_it_as_their_one_writer(scaled: Autoscaled) -> None:
    """Over a pool's growth, a machine's drain and release, and a shortfall: what the
    autoscaler writes, it alone writes (people's rows, the pools', it never does)."""
    with writers() as seen:
        _idle_machine(scaled)
        idle_for(scaled, 11)
        scaled.autoscale()  # the drain begins
        scaled.observe()
        scaled.autoscale()  # the web pod evicted
        scaled.observe()
        scaled.autoscale()  # released
        scaled.pod("big", gpus=8, gpu_type=A100)
        scaled.observe()
        scaled.autoscale()  # a shortfall: no pool makes 8 per machine

    assert GpuShortfall.objects.exists()
    mine = {"autoscale_gpushortfall", "clusters_machinedrain", "clusters_pooltarget"}
    assert {table: seen[table] - {TESTS} for table in mine} == {
        table: {"autoscale/reconcile.py"} for table in mine
    }
    assert "autoscale/reconcile.py" not in seen["clusters_machinepool"]


def test_an_idle_machine_with_nothing_to_evict_goes_in_the_pass_that_drains_it(
    scaled: Autoscaled,
) -> None:
    """Cordoned, its web pod evicted, and a listing of the node's pods taken after both
    shows only the DaemonSet's: released in the same step."""
    pool, machine, _ = _idle_machine(scaled)
    idle_for(scaled, 11)

    drain = scaled.autoscale()

    assert [(o.kind, o.outcome) for o in drain.outcomes] == [("node_drain", "ran")]
    assert scaled.pods() == {"agent-x1"}
    assert MachineDrain.objects.get(machine=machine).phase == MachineDrain.Phase.DRAINED
    assert MachinePool.objects.get(pk=pool.pk).effective_replicas == 0
    scaled.observe()
    assert kinds(scaled.autoscale()) == []  # a drained machine waits for its teardown


def test_the_dry_run_shows_the_decision_before_it_runs(scaled: Autoscaled, api: Any) -> None:
    scaled.pool("a100", BE)
    scaled.pod("train", gpus=1, gpu_type=A100)
    scaled.observe()

    shown = api.get(f"/api/v1/clusters/{scaled.cluster.pk}/plan/").json()

    (grow,) = [step for step in shown if step["action"] == "pool_grow"]
    assert grow["target"] == "pool a100"
    assert "pending pods asking nvidia-a100 x 1" in grow["reason"]
    assert not MachinePool.objects.get(name="a100").effective_replicas  # shown, not done


def test_a_gpu_pod_placed_between_the_plan_and_the_cordon_keeps_the_node_and_is_not_evicted(
    scaled: Autoscaled,
) -> None:
    """The plan read a mirror without it; the listing of the node's pods taken after the
    cordon shows it: the node is uncordoned and kept, the pod left alone."""
    pool, machine, node = _idle_machine(scaled)
    idle_for(scaled, 11)
    scaled.pod("sneaky", node=node, gpus=1)  # bound by the scheduler, not observed yet

    record = scaled.autoscale()

    assert [(o.kind, o.outcome) for o in record.outcomes] == [("node_drain", "dropped")]
    assert "sneaky" in scaled.pods()
    assert not scaled.cordoned(node)
    assert not MachineDrain.objects.filter(machine=machine).exists()
    assert MachinePool.objects.get(pk=pool.pk).effective_replicas == 1


def test_the_cluster_pages_plan_shows_the_decision_and_then_its_pass(
    scaled: Autoscaled, admin_client: Any
) -> None:
    scaled.pool("a100", BE)
    scaled.pod("train", gpus=1, gpu_type=A100)
    scaled.observe()
    plan_url = reverse("dashboard:cluster-plan", args=[scaled.cluster.pk])

    before = admin_client.get(plan_url).content.decode()
    scaled.autoscale()
    after = admin_client.get(plan_url).content.decode()

    assert "pool_grow" in before
    assert "grow pool a100 from 0 to 1 machines" in before  # what it does, it calls nothing
    assert "pool_grow" in after.split("Last passes")[1]  # the pass, as recorded
