"""The screens an operator reached for and did not have: global search, the audit log as a
diff, a pool edit shown as its plan before it is saved, a cluster's kubeconfig set from the
dashboard, and names where a person reads them (cloudspaces, images, networks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from capvco_web.models import AuditEvent
from cloud.models import Cloudspace, Image
from cloud.services import account_update
from clusters.models import Cluster, Machine, MachinePool
from dashboard.views.audit import audit_diff
from tests.dashboard.conftest import Kube, World
from tests.factories import (
    AccountFactory,
    AuditEventFactory,
    ClusterFactory,
    ClusterSiteFactory,
    ExternalNetworkFactory,
    LeakedNicFactory,
    LocationFactory,
    MachinePoolFactory,
    PodNicFactory,
    VirtualMachineFactory,
)

pytestmark = pytest.mark.django_db

TOKEN = "s3cr3t-observer-token"
KUBECONFIG = f"""
apiVersion: v1
kind: Config
current-context: prod
contexts:
- name: prod
  context: {{cluster: prod, user: observer}}
clusters:
- name: prod
  cluster: {{server: "https://api.prod.example:6443"}}
users:
- name: observer
  user: {{token: {TOKEN}}}
"""


def _found(client: Client, q: str) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    response = client.get("/search/", {"q": q})
    assert response.status_code == 200
    results = response.context["results"]
    exact = [(hit.kind, hit.label) for hit in results.exact]
    groups = {group.kind: [hit.label for hit in group.hits] for group in results.groups}
    return exact, groups


# Search


def test_search_puts_the_exact_name_first_and_groups_the_rest_by_kind(
    admin_client: Client, world: World, kube: Kube
) -> None:
    exact, groups = _found(admin_client, "prod")
    assert exact == [("Cluster", "prod")]
    vms = groups["VMs"]
    assert set(vms) == {m.vm_name for m in world.machines}
    assert world.orphan.name in groups["vGPUs"]
    assert kube.advertising.name in groups["Nodes"]


def test_search_by_vm_id_finds_the_machine_and_its_vm_and_links_them(
    admin_client: Client, world: World
) -> None:
    machine = world.machines[0]
    response = admin_client.get("/search/", {"q": str(machine.vm_id)})
    hits = response.context["results"].exact
    assert {(h.kind, h.label) for h in hits} == {("Machine", machine.name), ("VM", machine.vm_name)}
    anchor = f"/clusters/{world.cluster.pk}/#machine-{machine.pk}"
    assert all(h.url == anchor for h in hits)


def test_search_by_vgpu_id_ip_and_mac_is_exact(admin_client: Client, world: World) -> None:
    held = world.attached[0]
    assert _found(admin_client, str(held.vgpu_id))[0] == [("vGPU", held.name)]
    nic = PodNicFactory(
        cluster=world.cluster, location=world.fresh, mac="02:00:00:aa:bb:cc", ip="10.50.0.7"
    )
    leaked = LeakedNicFactory(
        cluster=world.cluster, location=world.fresh, mac="02:00:00:dd:ee:ff", ip="10.50.0.8"
    )
    by_ip = admin_client.get("/search/", {"q": "10.50.0.7"}).context["results"].exact
    assert [h.url for h in by_ip] == [f"/nics/?cluster={world.cluster.pk}#pod-nic-{nic.pk}"]
    by_mac = admin_client.get("/search/", {"q": "02-00-00-DD-EE-FF"}).context["results"].exact
    assert [h.url for h in by_mac] == [f"/nics/?cluster={world.cluster.pk}#leaked-nic-{leaked.pk}"]


def test_search_shows_only_what_the_user_may_see(
    member: Callable[[str], Client], world: World
) -> None:
    theirs = ClusterFactory(account=AccountFactory(name="globex"), name="prod-theirs")
    viewer = member("viewer")
    exact, groups = _found(viewer, "prod")
    assert exact == [("Cluster", "prod")]
    assert theirs.name not in groups.get("Clusters", [])
    assert _found(viewer, "prod-theirs") == ([], {})


def test_search_reads_a_bounded_number_of_rows_whatever_matches(
    admin_client: Client, world: World
) -> None:
    site = world.pool.site
    for n in range(15):
        MachinePoolFactory(site=site, name=f"batch{n}")
    response = admin_client.get("/search/", {"q": "batch"})
    (pools,) = [g for g in response.context["results"].groups if g.kind == "Pools"]
    assert len(pools.hits) == 10 and pools.more
    assert "More than 10 match" in response.content.decode()
    with CaptureQueriesContext(connection) as few:
        admin_client.get("/search/", {"q": "batch"})
    for n in range(15, 40):
        MachinePoolFactory(site=site, name=f"batch{n}")
    with CaptureQueriesContext(connection) as many:
        admin_client.get("/search/", {"q": "batch"})
    assert len(many) == len(few)


def test_search_refuses_a_word_too_long_and_says_how_short_a_word_matches(
    admin_client: Client, world: World
) -> None:
    response = admin_client.get("/search/", {"q": "x" * 201})
    assert response.status_code == 400
    assert "at most 200 characters" in response.content.decode()
    short = admin_client.get("/search/", {"q": "pr"})
    assert short.context["results"].groups == []  # "pr" is no name, and too short to contain
    assert "from 3 characters on" in short.content.decode()


def test_every_page_has_the_search_box(admin_client: Client, world: World) -> None:
    assert 'action="/search/"' in admin_client.get("/clusters/").content.decode()


# The audit log as a diff


def test_the_audit_log_shows_each_change_as_before_and_after(
    admin_client: Client, world: World
) -> None:
    AuditEventFactory(
        account=world.cluster.account,
        action="pool.scale",
        before={"replicas": 2},
        after={"replicas": 5},
    )
    page = admin_client.get("/audit/")
    (row,) = page.context["rows"]
    assert [(c.field, c.before, c.after) for c in row.changes] == [("replicas", "2", "5")]
    html = page.content.decode()
    assert "<dt>replicas</dt>" in html and "<del>2</del> → <ins>5</ins>" in html
    assert "{'replicas'" not in html


def test_the_diff_leaves_out_what_did_not_change_and_reads_creates_and_deletes() -> None:
    assert [
        (c.field, c.before, c.after)
        for c in audit_diff({"a": 1, "b": [1, 2], "c": None}, {"a": 1, "b": [2], "c": True})
    ] == [("b", "1, 2", "2"), ("c", "(none)", "yes")]
    created = audit_diff(None, {"name": "gpu"})
    assert [(c.field, c.has_before, c.after) for c in created] == [("name", False, "gpu")]
    deleted = audit_diff({"name": "gpu"}, None)
    assert [(c.field, c.before, c.has_after) for c in deleted] == [("name", "gpu", False)]


def test_the_audit_log_never_shows_a_secret(admin_client: Client, world: World) -> None:
    account = world.cluster.account
    account_update(
        account=account,
        changes={"credential": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJuZXcifQ.c2lnbmF0dXJl"},
        actor=User.objects.get(username="admin"),
    )
    # A record written by hand with a secret's value is shown as the mark only.
    AuditEventFactory(
        account=account, action="cluster.update", before={"kubeconfig": KUBECONFIG}, after=None
    )
    html = admin_client.get("/audit/").content.decode()
    assert "<del>(secret)</del> → <ins>(secret, changed)</ins>" in html
    assert "eyJhbGciOiJIUzI1NiJ9" not in html
    assert TOKEN not in html


# Pool edit, previewed as the plan


def _edit(pool: MachinePool, **changes: Any) -> dict[str, Any]:
    fields = {name: getattr(pool, name) for name in ("gpu_type", "gpu_count", "vcpus")}
    fields |= {"memory_mib": pool.memory_mib, "disk_gib": pool.disk_gib, "reason": "bigger"}
    return fields | changes


def test_a_pool_edit_offers_the_gpu_types_of_the_pools_location(
    admin_client: Client, world: World
) -> None:
    page = admin_client.get(f"/pools/{world.pool.pk}/edit/")
    field = page.context["form"]["gpu_type"]
    assert field.field.widget.input_type == "select"
    offered = [value for value, _ in field.field.widget.choices]
    assert offered == ["", "NVIDIA A100"]  # the T4 is another location's card
    assert '<option value="NVIDIA A100" selected>' in page.content.decode()

    asked = admin_client.post(f"/pools/{world.pool.pk}/edit/", _edit(world.pool, gpu_type="H100"))
    choices = dict(asked.context["form"]["gpu_type"].field.widget.choices)
    assert choices["H100"] == "H100 (not offered here)"


def test_a_pool_edit_is_previewed_as_its_plan_and_saves_nothing(
    admin_client: Client, world: World
) -> None:
    pool = MachinePool.objects.get(name="cpu")  # its machine failed: the plan provisions it
    events = AuditEvent.objects.count()
    response = admin_client.post(
        f"/pools/{pool.pk}/edit/", _edit(pool, gpu_type="NVIDIA A100", gpu_count=1)
    )
    assert response.status_code == 200
    preview = response.context["preview"]
    (step,) = preview.steps
    assert step.target == world.failed.name and step.card_id == world.a100.profile_id
    assert preview.new == {0}  # the edit makes it reserve an A100
    assert [(c.field, c.before, c.after) for c in preview.changes] == [
        ("gpu_type", "(none)", "NVIDIA A100"),
        ("gpu_count", "0", "1"),
    ]
    pool.refresh_from_db()
    assert (pool.gpu_type, pool.gpu_count) == ("", 0)
    assert AuditEvent.objects.count() == events


def test_a_pool_edit_previews_the_replacement_of_its_machines_one_at_a_time(
    admin_client: Client, world: World
) -> None:
    Machine.objects.filter(pool=world.pool).update(spec=world.pool.machine_spec())
    response = admin_client.post(f"/pools/{world.pool.pk}/edit/", _edit(world.pool, vcpus=16))
    preview = response.context["preview"]
    (step,) = preview.steps  # the first machine now; the second once the new one runs
    assert (step.kind, step.target) == ("replace", "gpu-0")
    assert step.reason == "pool spec changed: vcpus 4 -> 16"
    assert [str(c) for c in step.calls()] == [
        "whitesky stopVirtualMachine 7000",
        "whitesky deleteVirtualMachine 7000",
        f"whitesky deleteVGPU {world.attached[0].vgpu_id}",
    ]
    assert preview.new == {0} and preview.replaced == ["gpu-0", "gpu-1"]
    page = response.content.decode()
    assert "Machines gpu-0, gpu-1 will be replaced, one at a time" in page
    assert not Machine.objects.filter(pool=world.pool, delete_requested=True).exists()
    world.pool.refresh_from_db()
    assert world.pool.vcpus == 4


def test_a_pool_edit_that_changes_nothing_replaces_no_machine(
    admin_client: Client, world: World
) -> None:
    Machine.objects.filter(pool=world.pool).update(spec=world.pool.machine_spec())
    response = admin_client.post(f"/pools/{world.pool.pk}/edit/", _edit(world.pool))
    preview = response.context["preview"]
    assert preview.replaced == [] and preview.steps == []
    assert "No machine is replaced by this change." in response.content.decode()


def test_a_confirmed_pool_edit_is_saved_and_audited_by_the_service(
    admin_client: Client, world: World
) -> None:
    data = _edit(world.pool, vcpus=16, memory_mib=16384) | {"confirm": "1"}
    response = admin_client.post(f"/pools/{world.pool.pk}/edit/", data)
    assert response.status_code == 302
    assert response["Location"] == f"/clusters/{world.cluster.pk}/#pool-{world.pool.pk}"
    world.pool.refresh_from_db()
    assert (world.pool.vcpus, world.pool.memory_mib) == (16, 16384)
    event = AuditEvent.objects.get(action="pool.update")
    assert (event.before, event.after, event.reason) == (
        {"vcpus": 4, "memory_mib": 8192},
        {"vcpus": 16, "memory_mib": 16384},
        "bigger",
    )


def test_a_refused_pool_edit_shows_the_services_message(admin_client: Client, world: World) -> None:
    no_type = admin_client.post(
        f"/pools/{world.pool.pk}/edit/", _edit(world.pool, gpu_type="", gpu_count=2)
    )
    assert no_type.status_code == 400
    assert "needs a GPU type" in no_type.content.decode()
    Cluster.objects.filter(pk=world.cluster.pk).update(state=Cluster.State.DELETING)
    deleting = admin_client.post(
        f"/pools/{world.pool.pk}/edit/", _edit(world.pool, vcpus=8) | {"confirm": "1"}
    )
    assert deleting.status_code == 409
    assert "being deleted" in deleting.content.decode()
    world.pool.refresh_from_db()
    assert world.pool.vcpus == 4


def test_only_an_admin_edits_a_pool_and_is_offered_it(
    member: Callable[[str], Client], world: World, stranger: Client
) -> None:
    assert stranger.get(f"/pools/{world.pool.pk}/edit/").status_code == 404
    operator = member("operator")
    assert operator.get(f"/pools/{world.pool.pk}/edit/").status_code == 403
    assert (
        f"/pools/{world.pool.pk}/edit/"
        not in operator.get(f"/clusters/{world.cluster.pk}/").content.decode()
    )
    admin = member("admin")
    assert (
        f"/pools/{world.pool.pk}/edit/"
        in admin.get(f"/clusters/{world.cluster.pk}/").content.decode()
    )


# Kubeconfig


def test_an_admin_sets_a_kubeconfig_and_the_page_names_only_its_server(
    member: Callable[[str], Client], world: World
) -> None:
    admin = member("admin")
    url = f"/clusters/{world.cluster.pk}/kubeconfig/"
    assert "None is set" in admin.get(url).content.decode()
    response = admin.post(url, {"kubeconfig": KUBECONFIG, "reason": "observe it"})
    assert response.status_code == 302
    world.cluster.refresh_from_db()
    assert world.cluster.kubeconfig == KUBECONFIG.strip()
    event = AuditEvent.objects.get(action="cluster.kubeconfig_set")
    assert event.after == {"server": "https://api.prod.example:6443"}
    page = admin.get(url).content.decode()
    assert f"by {event.actor_name}, server https://api.prod.example:6443" in page
    assert TOKEN not in page
    assert TOKEN not in admin.get(f"/clusters/{world.cluster.pk}/").content.decode()


def test_a_refused_kubeconfig_is_not_echoed_back(
    member: Callable[[str], Client], world: World
) -> None:
    admin = member("admin")
    elsewhere = KUBECONFIG.replace("api.prod.example", "evil.example")
    response = admin.post(
        f"/clusters/{world.cluster.pk}/kubeconfig/", {"kubeconfig": elsewhere, "reason": "x"}
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "evil.example" in html and "refused" in html
    assert TOKEN not in html
    world.cluster.refresh_from_db()
    assert world.cluster.kubeconfig == ""


def test_a_kubeconfig_skipping_tls_verification_is_refused_in_the_dashboard(
    member: Callable[[str], Client], world: World
) -> None:
    admin = member("admin")
    insecure = KUBECONFIG.replace(
        '{server: "https://api.prod.example:6443"}',
        '{server: "https://api.prod.example:6443", insecure-skip-tls-verify: true}',
    )
    response = admin.post(
        f"/clusters/{world.cluster.pk}/kubeconfig/", {"kubeconfig": insecure, "reason": "x"}
    )
    assert response.status_code == 400
    assert "insecure-skip-tls-verify: true" in response.content.decode()
    world.cluster.refresh_from_db()
    assert world.cluster.kubeconfig == ""


def test_only_an_admin_sets_a_kubeconfig(member: Callable[[str], Client], world: World) -> None:
    operator = member("operator")
    url = f"/clusters/{world.cluster.pk}/kubeconfig/"
    assert operator.get(url).status_code == 403
    assert operator.post(url, {"kubeconfig": KUBECONFIG, "reason": "x"}).status_code == 403
    assert url not in operator.get(f"/clusters/{world.cluster.pk}/").content.decode()


# Names instead of ids


def test_the_cluster_page_names_the_cloudspace_and_image(
    admin_client: Client, world: World
) -> None:
    site = world.pool.site
    Cloudspace.objects.create(
        location=site.location, cloudspace_id=site.cloudspace_id, name="prod-space", status="X"
    )
    Image.objects.create(location=site.location, image_id=site.image_id, name="ubuntu-24.04")
    other = ClusterSiteFactory(
        cluster=world.cluster, location=LocationFactory(account=world.cluster.account)
    )
    html = admin_client.get(f"/clusters/{world.cluster.pk}/").content.decode()
    assert "prod-space" in html and "ubuntu-24.04" in html
    assert f'{other.image_id} <span class="muted">not listed</span>' in html


def test_a_leaked_nic_names_its_network(admin_client: Client, world: World) -> None:
    network = ExternalNetworkFactory(location=world.fresh, name="pods-net-x")
    LeakedNicFactory(cluster=world.cluster, location=world.fresh, network_id=network.network_id)
    VirtualMachineFactory(location=world.fresh)  # unrelated
    (row,) = admin_client.get("/nics/").context["leaked"]
    assert row.network == "pods-net-x"
