"""One writer per row, for every table of the project's apps: each statement that writes
a table (INSERT, UPDATE, DELETE) over a cluster's whole life is caught, with the project
module whose call made it, and the map table -> writers is asserted. A new writer of a
table, or a new table, fails here until it is placed in the map (and in
docs/architecture.md, Who owns what).

The life: a cluster with a GPU pool provisioned; its Kubernetes nodes and pods observed;
the pool scaled down (act tears the surplus down); a machine force deleted and its orphan
released by the sweep; a reservation made behind our back and released by a person; the
billing passes (rollups, idle GPUs, leak ledger, bill check) and a notify pass; the
cluster's teardown. Rows the test itself makes (accounts, the cluster, its sites and pools)
are set-up, not writers, and are left out."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.apps import apps
from django.db import connection

from billing.tasks import bill_check_account, billing_pass, leak_ledger_pass
from capvco_web.audit import SystemActor
from cloud.whitesky import whitesky_client
from clusters.models import Cluster, Machine, MachinePool
from clusters.releases import reservation_release_request
from clusters.services import (
    cluster_delete,
    cluster_kubeconfig_set,
    machine_delete,
    machine_force_delete,
    pool_scale,
)
from dashboard.saved_views import saved_view_create
from gpus.models import GpuProfile, VgpuReservation
from kube.client import kube_client
from kube.nodes import provider_id
from kube.observe import cluster_kube_observe
from notify.models import WebhookTarget
from notify.services import notify_pass, webhook_target_create
from tests.gpus.conftest import NL, Plane, plane  # noqa: F401 (the fixture)
from tests.gpus.support import auto_release_set, sweep
from tests.kube_sim import KubeSimulator, node_object, pod_object
from tests.notify.test_webhooks import Receiver, receiver  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[1]
WRITE = re.compile(r'^\s*(?:INSERT INTO|UPDATE|DELETE FROM)\s+"(\w+)"')
PROJECT_APPS = (
    "capvco_web", "cloud", "clusters", "gpus", "kube", "sriov", "billing", "autoscale", "notify",
    "dashboard",
)  # fmt: skip
# Writing machinery any writer calls: the writer is the module that called it (a model's
# save() in any models.py included).
MACHINERY = {"capvco_web/rows.py"}
TESTS = "(tests)"
COLLECTOR = str(Path("django", "db", "models", "deletion.py"))


def _writer(table: str) -> str | None:
    """The project module (not a test, not a library, not the machinery) whose call wrote;
    None for the database's own referential actions (ON DELETE CASCADE and SET NULL, which
    Django's collector runs for whoever deletes a row of another table): the rows that
    point at a deleted row go with it, and are that deletion's, not a writer's."""
    frame = sys._getframe(1)
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if str(path).endswith(COLLECTOR) and (collector := frame.f_locals.get("self")):
            origin = getattr(collector, "origin", None)
            model = getattr(origin, "model", None) or type(origin)
            if getattr(getattr(model, "_meta", None), "db_table", table) != table:
                return None
        frame = frame.f_back  # type: ignore[assignment]
    for frame_summary in _stack():
        if frame_summary.startswith("<"):
            continue  # code made at run time (a dataclass's __init__, "<string>"): no module
        path = Path(frame_summary).resolve()
        if not path.is_relative_to(ROOT) or {".venv", "tests"} & set(path.parts):
            continue
        name = str(path.relative_to(ROOT))
        if name not in MACHINERY and not name.endswith("/models.py"):
            return name
    return TESTS


def _stack() -> Iterator[str]:
    """The files of the calling frames, innermost first."""
    frame = sys._getframe(2)
    while frame is not None:
        yield frame.f_code.co_filename
        frame = frame.f_back  # type: ignore[assignment]


@contextmanager
def writers() -> Iterator[dict[str, set[str]]]:
    seen: dict[str, set[str]] = defaultdict(set)

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        if (found := WRITE.match(sql)) and (writer := _writer(found.group(1))) is not None:
            seen[found.group(1)].add(writer)
        return execute(sql, params, many, ctx)

    with connection.execute_wrapper(wrapper):
        yield seen


def project_tables() -> set[str]:
    return {
        model._meta.db_table
        for name in PROJECT_APPS
        for model in apps.get_app_config(name).get_models()
        if not model._meta.proxy
    }


def test_each_table_has_one_writer_over_a_whole_life(
    plane: Plane,  # noqa: F811
    kube_sim: KubeSimulator,
    receiver: Receiver,  # noqa: F811
    admin_user: Any,
) -> None:
    auto_release_set(plane.account, confirmations=1)
    with writers() as seen:
        webhook_target_create(
            target=WebhookTarget(account=plane.account, name="ops", url=receiver.url),
            actor=admin_user,
        )
        cluster = plane.cluster()
        pool = plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1, replicas=3)
        plane.converge(cluster)
        cluster_kubeconfig_set(
            cluster=cluster,
            kubeconfig=kube_sim.cluster("demo").kubeconfig_yaml,
            actor=admin_user,
            reason="observe it",
        )
        first = Machine.objects.get(name="a100-0")
        assert first.vm_id is not None
        kube_sim.put(
            "demo",
            node_object("worker-0", provider_id=provider_id(NL, first.vm_id), gpus=1),
            node_object("stray"),  # no machine's: flagged unowned
            pod_object("train", node="worker-0", gpus=1),
        )
        found = Cluster.objects.get(pk=cluster.pk)
        with kube_client(found) as client:
            cluster_kube_observe(client=client, cluster=found)
        pool_scale(
            pool=MachinePool.objects.get(pk=pool.pk), replicas=2, actor=admin_user, reason="less"
        )
        plane.converge(cluster)
        machine_delete(
            machine=Machine.objects.get(name="a100-1"), actor=admin_user, reason="slow disk"
        )
        plane.converge(cluster)  # torn down, and made anew in its place
        machine_force_delete(
            machine=Machine.objects.get(name="a100-0"), actor=SystemActor.RECONCILER, reason="stuck"
        )
        card = GpuProfile.objects.filter(location__name=NL).first()
        assert card is not None
        with whitesky_client(plane.account) as client:
            client.reserve_vgpu(location=NL, gpu_id=card.profile_id, name="team-x-gpu")
        plane.observe()
        sweep(plane)  # the force-deleted machine's orphan goes
        foreign = VgpuReservation.objects.get(name="team-x-gpu")
        reservation_release_request(reservation=foreign, actor=admin_user, reason="not ours")
        sweep(plane)
        billing_pass()
        leak_ledger_pass()
        bill_check_account(plane.account.pk)
        notify_pass()
        saved_view_create(  # an operator keeps the list of what is left
            user=admin_user, list_name="reservations", name="left", query="orphaned=true"
        )
        cluster_delete(
            cluster=Cluster.objects.get(pk=cluster.pk),
            actor=admin_user,
            reason="end of project",
            confirm=cluster.name,
        )
        plane.converge(cluster)
        plane.observe()

    assert plane.sim_vgpus("") == []  # everything made above was released
    assert set(VgpuReservation.objects.values_list("state", flat=True)) == {"released"}
    assert not Cluster.objects.filter(pk=cluster.pk).exists()
    written = {
        table: modules - {TESTS}
        for table, modules in seen.items()
        if table in project_tables() and modules - {TESTS}
    }
    assert written == WRITERS
    assert project_tables() == set(WRITERS) | NOT_WRITTEN_BY_THIS_LIFE


# Each table, and the modules that wrote it over the life above. Several modules of one
# table are one concern, said why; a second concern is named as such.
WRITERS = {
    # Act: machines it makes (the plan's index), how far each got, and its teardown mark;
    # a person's force delete drops the row without teardown (services, DELETE only).
    "clusters_machine": {"clusters/reconcile.py", "clusters/services.py"},
    "clusters_machinedeletion": {"clusters/services.py"},  # a person's request
    "clusters_clusterstatus": {"clusters/reconcile.py"},  # act's deletion blockers
    "clusters_cluster": {"clusters/services.py"},  # what people ask for
    "clusters_clustersite": {"clusters/services.py"},
    # The replicas are people's (services); next_index is act's count of the indexes it
    # used (never reused): act state on a desired row, still to move.
    "clusters_machinepool": {"clusters/services.py", "clusters/reconcile.py"},
    "clusters_vmremovalrequest": {"clusters/releases.py"},
    # The Kubernetes mirror: the listing (kube_observe) and the machine it is matched to,
    # with its flags (nodes).
    "clusters_kubenode": {"kube/observe.py", "kube/nodes.py"},
    "clusters_kubepod": {"kube/observe.py"},
    # Observed state off the cluster and the machine rows: the listing's stamps, and the
    # machines' node flags, each with its one writer.
    "kube_clusterobservation": {"kube/observe.py"},
    "kube_machinenode": {"kube/nodes.py"},
    # The location's listing stamps, written by clusters' observe pass.
    "cloud_location": {"clusters/observe.py"},
    # What whitesky lists (cloud's mirror) and the orphan flags judged from the same
    # listing in the same pass (clusters.orphans): observe's, in two apps.
    "cloud_virtualmachine": {"cloud/observe.py", "clusters/orphans.py"},
    "gpus_gpuprofile": {"gpus/mirror.py"},
    "gpus_listedvgpu": {"gpus/mirror.py"},
    # The reservations we keep: gpus' services, and the release a person asks for.
    "gpus_vgpureservation": {"gpus/services.py", "gpus/release_requests.py"},
    "capvco_web_auditevent": {"capvco_web/audit.py"},
    "capvco_web_planpass": {"capvco_web/plans.py"},  # the dispatcher's record of each pass
    "billing_billcheck": {"billing/bills.py"},
    "billing_capacityrollup": {"billing/rollups.py"},
    "billing_costrollup": {"billing/rollups.py"},
    "billing_rollup": {"billing/rollups.py"},
    "notify_notice": {"notify/services.py"},
    "notify_webhooktarget": {"notify/services.py"},
    "dashboard_savedview": {"dashboard/saved_views.py"},  # a person's views of a list
}
# Tables this life does not write (set up by the test, or written by a life of their own:
# SR-IOV's NICs, tokens and networks, the watch process, API tokens, a leak billed over
# hours, idle GPU spells, GPU pods' label sets (billing/rollups.py alone; this life's
# hour samples no pod on an attached vGPU), the GPU add-on applied, GPU use
# (kube/gpu_use.py alone), GPU verification: its writers are asserted in
# tests/kube/test_gpu_verify.py; the pool autoscaler's: in
# tests/autoscale/test_autoscale.py). A new table lands here or in WRITERS.
NOT_WRITTEN_BY_THIS_LIFE = {
    "autoscale_gpushortfall", "clusters_machinedrain", "clusters_pooltarget",
    "billing_billitem", "billing_idlespell", "billing_labelcostrollup", "billing_leak",
    "capvco_web_apitoken",
    "capvco_web_heartbeat", "cloud_account", "cloud_cloudspace", "cloud_image",
    "cloud_membership", "clusters_kubewatch", "kube_gpuaddonstate", "kube_gpuverification",
    "kube_gpuverifyjob", "kube_gpuverifyrequest", "kube_gpuuselocation", "kube_gpuusesample",
    "kube_gpuusestate",
    "notify_webhooktest",
    "sriov_agenttoken",
    "sriov_externalnetwork", "sriov_gonepod", "sriov_leakednic", "sriov_podnic",
    "sriov_sriovconfig",
}  # fmt: skip
