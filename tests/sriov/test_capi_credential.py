"""Imported clusters: the SR-IOV credential is read from the Secret that the Cluster API
names, in the account's management cluster (the fake Kubernetes API)."""

from __future__ import annotations

import base64

import pytest
from django.core.exceptions import ValidationError

from capvco_web.models import AuditEvent
from cloud.models import Account
from clusters.models import Cluster, MachinePool
from sriov.capi_credential import imported_credential_sync
from sriov.models import SriovConfig
from sriov.services import sriov_config_set
from tests.sriov.support import World

REF = "capi/sriov-cred"


def secret(token: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "sriov-cred", "namespace": "capi"},
        "data": {"token": base64.b64encode(token.encode()).decode()},
    }


@pytest.fixture
def imported(world: World) -> World:
    """The world's cluster as the Cluster API import leaves it, SR-IOV off and without
    credential, with a management cluster that holds the Secret its template names."""
    mgmt = world.kube.cluster("mgmt")
    Account.objects.filter(pk=world.account.pk).update(capi_kubeconfig=mgmt.kubeconfig_yaml)
    Cluster.objects.filter(pk=world.cluster.pk).update(imported_from="capi/demo")
    MachinePool.objects.filter(cluster=world.cluster).update(capi_sriov_secret_ref=REF)
    SriovConfig.objects.filter(cluster=world.cluster).delete()
    world.cluster = Cluster.objects.select_related("account").get(pk=world.cluster.pk)
    return world


def test_the_credential_is_read_from_the_named_secret(imported: World) -> None:
    token = imported.sim.token(subject="capi-sriov")
    imported.kube.put("mgmt", secret(token))
    assert imported_credential_sync(cluster=imported.cluster)
    config = SriovConfig.objects.get(cluster=imported.cluster)
    assert (config.credential, config.credential_source, config.credential_error) == (
        token,
        REF,
        "",
    )
    event = AuditEvent.objects.filter(action="sriov.config_set").latest("pk")
    assert event.actor_name == "capi-import" and token not in str(event.after)
    # Nothing changed: nothing written.
    assert not imported_credential_sync(cluster=imported.cluster)
    assert (
        AuditEvent.objects.filter(action="sriov.config_set", actor_name="capi-import").count() == 1
    )
    # A new one in the Secret replaces it.
    newer = imported.sim.token(subject="capi-sriov-2")
    imported.kube.put("mgmt", secret(newer))
    assert imported_credential_sync(cluster=imported.cluster)
    assert SriovConfig.objects.get(cluster=imported.cluster).credential == newer


def test_a_missing_secret_is_said_and_changes_nothing(imported: World) -> None:
    assert not imported_credential_sync(cluster=imported.cluster)
    config = SriovConfig.objects.get(cluster=imported.cluster)
    assert config.credential == "" and "capi/sriov-cred" in config.credential_error
    assert "not found" in config.credential_error


def test_the_accounts_own_credential_in_the_secret_is_refused(imported: World) -> None:
    imported.kube.put("mgmt", secret(imported.account.credential))
    assert not imported_credential_sync(cluster=imported.cluster)
    config = SriovConfig.objects.get(cluster=imported.cluster)
    assert config.credential == "" and "account's own credential" in config.credential_error


def test_people_cannot_set_an_imported_clusters_credential(imported: World) -> None:
    with pytest.raises(ValidationError) as refused:
        sriov_config_set(
            cluster=imported.cluster,
            changes={"credential": imported.sim.token(subject="x")},
            actor=_admin(imported),
        )
    assert "read from the Secret capi/sriov-cred" in str(refused.value)


def test_the_beat_pass_reads_it_for_imported_clusters(imported: World, run_tasks) -> None:  # type: ignore[no-untyped-def]
    from sriov.tasks import sriov_reclaim_all

    token = imported.sim.token(subject="capi-sriov")
    imported.kube.put("mgmt", secret(token))
    with run_tasks():
        sriov_reclaim_all.delay()
    assert SriovConfig.objects.get(cluster=imported.cluster).credential == token


def _admin(world: World):  # type: ignore[no-untyped-def]
    from tests.factories import MembershipFactory, UserFactory

    user = UserFactory()
    MembershipFactory(user=user, account=world.account, role="admin")
    return user
