"""The admin: deleting an account, a site or a pool (delete page, bulk action, the inline
checkbox on the cluster page) says what is in the way while it is in use and deletes
nothing; an empty one is deleted through its service, audited as the user."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from capvco_web.models import AuditEvent
from cloud.models import Account
from clusters.models import Cluster, ClusterSite, MachinePool
from gpus.models import VgpuReservation
from tests.clusters.conftest import (
    ACCOUNT_IN_USE,
    POOL_IN_USE,
    SITE_IN_USE,
    deletes_audited,
    empty_pool,
    machines_left,
)

pytestmark = pytest.mark.django_db


def admin_delete_url(obj: Any) -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_delete", args=[obj.pk])


def test_admin_delete_view_of_a_pool_with_machines_says_why_and_deletes_nothing(
    admin_client: Client, pool: MachinePool
) -> None:
    asked = admin_client.get(admin_delete_url(pool))
    posted = admin_client.post(admin_delete_url(pool), {"post": "yes"})

    assert POOL_IN_USE in asked.content.decode()
    assert posted.status_code == 200
    assert POOL_IN_USE in posted.content.decode()
    assert machines_left() == ["gpu-0", "gpu-1"]
    assert deletes_audited() == []


def test_admin_delete_view_of_a_site_with_machines_says_why_and_deletes_nothing(
    admin_client: Client, pool: MachinePool
) -> None:
    posted = admin_client.post(admin_delete_url(pool.site), {"post": "yes"})

    assert posted.status_code == 200
    assert SITE_IN_USE in posted.content.decode()
    assert machines_left() == ["gpu-0", "gpu-1"]
    assert deletes_audited() == []


def test_admin_bulk_delete_of_sites_with_machines_says_why_and_deletes_nothing(
    admin_client: Client, pool: MachinePool
) -> None:
    posted = admin_client.post(
        reverse("admin:clusters_clustersite_changelist"),
        {"action": "delete_selected", "_selected_action": [pool.site_id], "post": "yes"},
    )

    assert posted.status_code == 200
    assert SITE_IN_USE in posted.content.decode()
    assert machines_left() == ["gpu-0", "gpu-1"]
    assert deletes_audited() == []


def test_admin_delete_of_an_account_with_a_cluster_says_why(
    admin_client: Client, site: ClusterSite
) -> None:
    account = site.cluster.account

    posted = admin_client.post(admin_delete_url(account), {"post": "yes"})

    assert ACCOUNT_IN_USE in posted.content.decode()
    assert Account.objects.filter(pk=account.pk).exists()


def test_admin_delete_view_and_bulk_delete_of_empty_rows_are_audited_as_the_user(
    admin_client: Client, admin_user: Any, site: ClusterSite
) -> None:
    pool = empty_pool(site)

    by_view = admin_client.post(admin_delete_url(pool), {"post": "yes"})
    by_action = admin_client.post(
        reverse("admin:clusters_clustersite_changelist"),
        {"action": "delete_selected", "_selected_action": [site.pk], "post": "yes"},
    )

    assert (by_view.status_code, by_action.status_code) == (302, 302)
    assert not ClusterSite.objects.exists()
    events = AuditEvent.objects.order_by("pk")
    assert [(e.action, e.actor) for e in events] == [
        ("pool.delete", admin_user),
        ("site.delete", admin_user),
    ]


def cluster_page_data(client: Client, cluster: Cluster) -> tuple[str, dict[str, Any]]:
    """The cluster's change page, and the form data that saves it unchanged."""
    url = reverse("admin:clusters_cluster_change", args=[cluster.pk])
    page = client.get(url)
    data: dict[str, Any] = {}
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        data.update({management.add_prefix(k): v for k, v in management.initial.items()})
        for form in formset.forms:
            for name in form.fields:
                value = form[name].value()
                if value is not None and value is not False:  # 0 is a value
                    data[form.add_prefix(name)] = value
    return url, data


def test_admin_inline_delete_of_a_pool_with_machines_says_why_and_deletes_nothing(
    admin_client: Client, pool: MachinePool
) -> None:
    url, data = cluster_page_data(admin_client, pool.cluster)

    posted = admin_client.post(url, {**data, "pools-0-DELETE": "on"})

    assert posted.status_code == 200
    assert POOL_IN_USE in posted.content.decode()
    assert machines_left() == ["gpu-0", "gpu-1"]
    assert deletes_audited() == []


def test_admin_inline_delete_of_a_site_with_pools_says_why_and_deletes_nothing(
    admin_client: Client, pool: MachinePool
) -> None:
    url, data = cluster_page_data(admin_client, pool.cluster)

    posted = admin_client.post(url, {**data, "sites-0-DELETE": "on"})

    assert posted.status_code == 200
    assert SITE_IN_USE in posted.content.decode()
    assert machines_left() == ["gpu-0", "gpu-1"]
    assert ClusterSite.objects.filter(pk=pool.site_id).exists()


def test_admin_inline_delete_of_an_empty_pool_is_audited_as_the_user(
    admin_client: Client, admin_user: Any, site: ClusterSite
) -> None:
    empty_pool(site)
    url, data = cluster_page_data(admin_client, site.cluster)

    posted = admin_client.post(url, {**data, "pools-0-DELETE": "on"})

    assert posted.status_code == 302
    assert not MachinePool.objects.exists()
    event = AuditEvent.objects.get(action="pool.delete")
    assert (event.actor, event.before["name"]) == (admin_user, "cpu")


def test_admin_delete_of_an_account_with_released_reservations_only_is_audited(
    admin_client: Client, admin_user: Any, site: ClusterSite
) -> None:
    account = site.cluster.account
    site.delete()
    site.cluster.delete()
    VgpuReservation.objects.create(
        location=site.location, name="capvco-old-a-0-gpu-0", vgpu_id="v-1",
        state=VgpuReservation.State.RELEASED,
    )  # fmt: skip

    posted = admin_client.post(admin_delete_url(account), {"post": "yes"})

    assert posted.status_code == 302
    assert not Account.objects.exists()
    assert not VgpuReservation.objects.exists()
    assert AuditEvent.objects.get(action="account.delete").actor == admin_user


def test_an_admin_message_names_a_pool_as_it_is_spelt(
    admin_client: Client, pool: MachinePool
) -> None:
    page = admin_client.post(
        reverse("admin:clusters_machinepool_changelist"),
        {
            "action": "scale_selected", "_selected_action": [pool.pk],
            "confirm": "yes", "replicas": 3, "reason": "more",
        },
        follow=True,
    )  # fmt: skip

    messages = page.content.decode().split('<ul class="messagelist">')[1].split("</ul>")[0]
    assert "prod/gpu: scaled to 3." in messages  # not "Prod/gpu"
