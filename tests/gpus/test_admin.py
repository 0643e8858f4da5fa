"""The admin: reservations read-only, released or machines force-deleted only with a
reason (audited, as the user) and, for a force delete or a cluster's deletion, each
name typed again, the credential never shown, pool rules shown per field."""

from __future__ import annotations

import re
from typing import Any

from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from capvco_web.models import AuditEvent
from cloud.models import Account
from clusters.models import Cluster, Machine, MachinePool
from gpus.models import VgpuReservation
from tests.gpus.conftest import NL, Plane
from tests.gpus.support import orphan_made

RESERVATIONS = reverse("admin:gpus_vgpureservation_changelist")
MACHINES = reverse("admin:clusters_machine_changelist")
RELEASE = {"action": "release_selected"}


def action_post(client: Client, url: str, action: str, pks: list[int], **fields: str) -> Any:
    return client.post(url, {"action": action, "_selected_action": pks, **fields})


def test_reservation_changelist_shows_owner_orphans_and_cost(
    plane: Plane, admin_client: Client
) -> None:
    orphan_made(plane)

    response = admin_client.get(RESERVATIONS, {"orphaned": "yes"})

    assert response.status_code == 200
    page = response.content.decode()
    assert "capvco-demo-a100-0-gpu-0" in page
    assert " EUR" in page
    assert "Release selected reservations" in page


def test_an_orphan_of_a_force_deleted_machine_is_not_shown_as_owned_by_it(
    plane: Plane, admin_client: Client
) -> None:
    orphan_made(plane)  # its machine force-deleted

    page = admin_client.get(RESERVATIONS, {"orphaned": "yes"}).content.decode()

    cells = re.findall(r'<td class="field-owner">(.*?)</td>', page)
    assert cells == ["machine demo/a100-0 does not exist"]
    # The machine made in its place holds a vGPU of its own, and is its owner.
    plane.converge(Cluster.objects.get())
    page = admin_client.get(RESERVATIONS, {"orphaned": "no"}).content.decode()
    assert re.findall(r'<td class="field-owner">(.*?)</td>', page) == ["demo/a100-1"]


def test_release_asks_for_a_reason_and_releases_nothing_without_one(
    plane: Plane, admin_client: Client
) -> None:
    row = orphan_made(plane)

    asked = action_post(admin_client, RESERVATIONS, "release_selected", [row.pk])
    refused = action_post(
        admin_client, RESERVATIONS, "release_selected", [row.pk], confirm="yes", reason="  "
    )

    assert asked.status_code == 200
    assert asked.templates[0].name == "admin/gpus/release_confirm.html"
    assert refused.status_code == 200
    assert refused.context["form"].errors == {"reason": ["This field is required."]}
    assert VgpuReservation.objects.get(pk=row.pk).state == VgpuReservation.State.ATTACHED
    assert len(plane.sim_vgpus()) == 1
    assert not AuditEvent.objects.filter(action="vgpu.release").exists()


def test_release_with_a_reason_stops_the_charge_and_audits_the_user(
    plane: Plane, admin_client: Client, admin_user: Any, run_tasks: Any
) -> None:
    row = orphan_made(plane)

    with run_tasks():
        response = action_post(
            admin_client, RESERVATIONS, "release_selected", [row.pk], confirm="yes", reason="orphan"
        )

    assert response.status_code == 302
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "capvco-demo-a100-0-gpu-0: release requested; a worker carries it out and the audit "
        "log shows the outcome."
    ]
    assert plane.sim_vgpus() == []
    assert plane.unassigned_billed() == {}
    event = AuditEvent.objects.get(action="vgpu.release")
    assert (event.actor, event.actor_name, event.reason) == (admin_user, "admin", "orphan")
    # It was attached to the force-deleted machine's running VM: that VM went first.
    assert plane.sim_vms() == []
    assert AuditEvent.objects.get(action="vm.delete").actor == admin_user


def test_release_of_a_running_machines_gpu_is_refused_up_front_saying_what_to_do(
    plane: Plane, admin_client: Client, run_tasks: Any
) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    row = VgpuReservation.objects.get()
    vm_id = Machine.objects.get().vm_id

    with run_tasks():
        response = action_post(
            admin_client, RESERVATIONS, "release_selected", [row.pk], confirm="yes", reason="test"
        )

    assert response.status_code == 302
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        f"Refused: capvco-demo-a100-0-gpu-0 is attached to machine demo/a100-0 (VM {vm_id}): "
        "scale pool a100 down or delete the machine"
    ]
    row.refresh_from_db()
    assert (row.state, row.release_requested_at) == (VgpuReservation.State.ATTACHED, None)
    assert not AuditEvent.objects.filter(action__startswith="vgpu.release").exists()
    assert len(plane.sim_vgpus()) == 1
    assert [vm["status"] for vm in plane.sim_vms()] == ["RUNNING"]
    assert "deleteVGPU" not in {c["operation"] for c in plane.sim.calls()["calls"]}


def test_confirmation_page_says_what_happens_to_a_machines_gpu_and_an_orphans_vm(
    plane: Plane, admin_client: Client
) -> None:
    row = orphan_made(plane)

    page = action_post(admin_client, RESERVATIONS, "release_selected", [row.pk])

    text = " ".join(page.content.decode().split())
    assert "loses its GPU" not in text
    assert "attached to a machine's VM is <strong>refused</strong>" in text
    assert "Scale the machine's pool down or delete the machine instead" in text
    assert "the VM is stopped and deleted first" in text


def test_release_failure_is_audited_not_an_error_page(
    plane: Plane, admin_client: Client, run_tasks: Any
) -> None:
    row = orphan_made(plane)
    plane.sim.fault(operation="deleteVGPU", status=400)

    with run_tasks():
        response = action_post(
            admin_client, RESERVATIONS, "release_selected", [row.pk], confirm="yes", reason="orphan"
        )

    assert response.status_code == 302
    refusal = AuditEvent.objects.get(action="vgpu.release_refused")
    assert refusal.reason == "orphan" and "HTTP 400" in refusal.after["error"]
    assert VgpuReservation.objects.get(pk=row.pk).state == VgpuReservation.State.ATTACHED
    plane.sim.clear_faults()
    assert len(plane.sim_vgpus()) == 1


def test_reservations_cannot_be_added_edited_or_deleted_in_the_admin(
    plane: Plane, admin_client: Client
) -> None:
    row = orphan_made(plane)
    change = reverse("admin:gpus_vgpureservation_change", args=[row.pk])

    admin_client.post(change, {"name": "renamed", "state": "released"})

    assert VgpuReservation.objects.get(pk=row.pk).name == "capvco-demo-a100-0-gpu-0"
    assert admin_client.get(reverse("admin:gpus_vgpureservation_add")).status_code == 403
    delete = reverse("admin:gpus_vgpureservation_delete", args=[row.pk])
    assert admin_client.get(delete).status_code == 403


def test_force_delete_needs_a_reason_and_is_audited_as_the_user(
    plane: Plane, admin_client: Client, admin_user: Any
) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    machine = Machine.objects.get()

    refused = action_post(
        admin_client, MACHINES, "force_delete_selected", [machine.pk], confirm="yes", reason=""
    )
    assert refused.status_code == 200
    assert Machine.objects.filter(pk=machine.pk).exists()

    unnamed = action_post(
        admin_client, MACHINES, "force_delete_selected", [machine.pk], confirm="yes",
        reason="stuck", names="",
    )  # fmt: skip
    assert unnamed.status_code == 200 and b"Names" in unnamed.content
    misnamed = action_post(
        admin_client, MACHINES, "force_delete_selected", [machine.pk], confirm="yes",
        reason="stuck", names="gpu-9",
    )  # fmt: skip
    assert misnamed.status_code == 302
    assert Machine.objects.filter(pk=machine.pk).exists()
    assert not AuditEvent.objects.filter(action="machine.force_delete").exists()

    done = action_post(
        admin_client, MACHINES, "force_delete_selected", [machine.pk], confirm="yes",
        reason="stuck", names=machine.name,
    )  # fmt: skip

    assert done.status_code == 302
    assert not Machine.objects.filter(pk=machine.pk).exists()
    event = AuditEvent.objects.get(action="machine.force_delete")
    assert (event.actor, event.reason) == (admin_user, "stuck")
    assert len(plane.sim_vgpus()) == 1  # force: left behind, for the orphan sweep


def test_cluster_delete_in_the_admin_needs_each_name_typed(
    plane: Plane, admin_client: Client
) -> None:
    demo, other = plane.cluster("demo"), plane.cluster("other")
    clusters = reverse("admin:clusters_cluster_changelist")

    partly = admin_client.post(
        clusters,
        {"action": "delete_selected_clusters", "_selected_action": [demo.pk, other.pk],
         "confirm": "yes", "reason": "project over", "names": "demo othre"},
        follow=True,
    )  # fmt: skip

    said = [str(m) for m in get_messages(partly.wsgi_request)]
    assert "other: not deleted: Type the cluster's name, other, to confirm." in said
    states = dict(Cluster.objects.values_list("name", "state"))
    assert states == {"demo": Cluster.State.DELETING, "other": Cluster.State.ACTIVE}
    assert AuditEvent.objects.filter(action="cluster.delete_requested").count() == 1


def test_account_page_never_shows_the_credential(plane: Plane, admin_client: Client) -> None:
    account = Account.objects.get(pk=plane.account.pk)
    url = reverse("admin:cloud_account_change", args=[account.pk])

    page = admin_client.get(url).content.decode()

    assert account.credential and account.credential not in page
    assert 'name="new_credential"' in page
    assert 'name="credential"' not in page


def test_new_credential_replaces_the_stored_one_and_is_not_echoed(
    plane: Plane, admin_client: Client
) -> None:
    account = plane.account
    url = reverse("admin:cloud_account_change", args=[account.pk])
    new = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJuZXcifQ.bmV3LXNlY3JldC10b2tlbg"
    form = {
        "name": account.name,
        "api_url": account.api_url,
        "iam_url": account.iam_url,
        "customer_id": account.customer_id,
        "orphan_grace_period": "01:00:00",
        "orphan_confirmations": "3",
        "new_credential": new,
    }

    invalid = admin_client.post(url, {**form, "orphan_confirmations": "0"})
    assert invalid.status_code == 200
    assert new not in invalid.content.decode()
    assert Account.objects.get(pk=account.pk).credential == account.credential

    assert admin_client.post(url, form).status_code == 302
    assert Account.objects.get(pk=account.pk).credential == new

    assert admin_client.post(url, {**form, "new_credential": ""}).status_code == 302
    assert Account.objects.get(pk=account.pk).credential == new


def test_pool_with_gpus_and_no_type_gets_a_field_error_on_gpu_type(
    plane: Plane, admin_client: Client
) -> None:
    cluster = plane.cluster()
    site = cluster.sites.get(location__name=NL)

    response = admin_client.post(
        reverse("admin:clusters_machinepool_add"),
        {
            "cluster": cluster.pk,
            "site": site.pk,
            "name": "gpu",
            "replicas": 1,
            "vcpus": 4,
            "memory_mib": 8192,
            "disk_gib": 50,
            "gpu_count": 2,
            "autoscale_min": 0,
            "autoscale_max": 0,
        },
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["gpu_type"]
    assert "needs a GPU type" in errors["gpu_type"][0]
    assert not MachinePool.objects.exists()


def test_admin_pages_render(plane: Plane, admin_client: Client) -> None:
    orphan_made(plane)
    cluster = Cluster.objects.get()
    urls = [
        reverse(f"admin:{name}_changelist")
        for name in (
            "gpus_vgpureservation",
            "gpus_gpuprofile",
            "cloud_account",
            "cloud_location",
            "clusters_cluster",
            "clusters_clustersite",
            "clusters_machinepool",
            "clusters_machine",
        )
    ]
    urls += [
        reverse("admin:clusters_cluster_change", args=[cluster.pk]),
        reverse("admin:cloud_account_add"),
        reverse("admin:gpus_vgpureservation_change", args=[VgpuReservation.objects.get().pk]),
    ]

    assert {url: admin_client.get(url).status_code for url in urls} == dict.fromkeys(urls, 200)
