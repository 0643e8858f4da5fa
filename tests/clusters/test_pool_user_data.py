"""A pool's user data is bounded (whitesky documents no limit; ours is 65,536 characters),
refused beyond it naming the field from every entry point, and audited as its size and
digest, never as its text (it may hold anything a VM boots with)."""

from __future__ import annotations

import hashlib

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from clusters.models import MAX_USER_DATA_LENGTH, ClusterSite, MachinePool
from clusters.services import pool_update

pytestmark = pytest.mark.django_db
SCRIPT = "#!/bin/sh\necho 'secret-ish boot text'\n" * 40  # 1,520 characters
TOO_LONG = "#cloud-config\n" + "a" * MAX_USER_DATA_LENGTH


def digest(text: str) -> str:
    size = len(text.encode())
    shown = f"{size / 1024:.1f} KiB" if size >= 1024 else f"{size} B"
    return f"(user data, {shown}, sha256 {hashlib.sha256(text.encode()).hexdigest()[:16]})"


def test_the_bound_is_64_ki_characters() -> None:
    assert MAX_USER_DATA_LENGTH == 65_536


def test_the_model_refuses_user_data_over_the_bound_naming_the_field(site: ClusterSite) -> None:
    pool = MachinePool(cluster=site.cluster, site=site, name="cpu", user_data=TOO_LONG)
    with pytest.raises(ValidationError) as refused:
        pool.full_clean()
    assert list(refused.value.message_dict) == ["user_data"]
    assert "65536" in refused.value.message_dict["user_data"][0].replace(",", "")

    pool.user_data = "x" * MAX_USER_DATA_LENGTH
    pool.full_clean()  # exactly the bound is fine


def test_the_api_refuses_user_data_over_the_bound_and_makes_nothing(
    api: APIClient, site: ClusterSite
) -> None:
    response = api.post(
        "/api/v1/pools/",
        {"cluster": site.cluster_id, "site": site.pk, "name": "cpu", "user_data": TOO_LONG},
        format="json",
    )

    assert response.status_code == 400, response.json()
    assert list(response.json()["fields"]) == ["user_data"]
    assert not MachinePool.objects.exists()


def test_the_admin_refuses_user_data_over_the_bound(
    admin_client: Client, site: ClusterSite
) -> None:
    response = admin_client.post(
        reverse("admin:clusters_machinepool_add"),
        {
            "cluster": site.cluster_id, "site": site.pk, "name": "cpu", "replicas": 1,
            "vcpus": 4, "memory_mib": 8192, "disk_gib": 50, "gpu_count": 0,
            "autoscale_min": 0, "autoscale_max": 0, "user_data": TOO_LONG,
        },
    )  # fmt: skip

    assert response.status_code == 200  # the form again, with the error
    assert response.context["adminform"].form.errors.keys() == {"user_data"}
    assert not MachinePool.objects.exists()


def test_user_data_is_audited_as_its_size_and_digest(api: APIClient, site: ClusterSite) -> None:
    made = api.post(
        "/api/v1/pools/",
        {"cluster": site.cluster_id, "site": site.pk, "name": "cpu", "user_data": SCRIPT},
        format="json",
    )
    assert made.status_code == 201, made.json()
    pool = MachinePool.objects.get(name="cpu")
    pool.user_data = "#cloud-config\n{}\n"
    pool_update(pool=pool, actor=SystemActor.RECONCILER)

    created = AuditEvent.objects.get(action="pool.create")
    updated = AuditEvent.objects.get(action="pool.update")
    assert (
        created.after["user_data"]
        == digest(SCRIPT)
        == (f"(user data, 1.5 KiB, sha256 {hashlib.sha256(SCRIPT.encode()).hexdigest()[:16]})")
    )
    assert (updated.before, updated.after) == (
        {"user_data": digest(SCRIPT)},
        {"user_data": digest("#cloud-config\n{}\n")},
    )
    assert digest("#cloud-config\n{}\n").startswith("(user data, 17 B, sha256 ")
    recorded = AuditEvent.objects.values_list("before", "after")
    assert "secret-ish" not in str(list(recorded))
