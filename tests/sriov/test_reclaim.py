"""Reclaim: the NIC of a pod that died without DEL is released after the grace period,
not before, and never from a partial pod listing; NICs nobody owns are flagged, and
detached after grace only when the account allows or a person asks."""

from __future__ import annotations

from datetime import timedelta

import pytest
import requests
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from capvco_web.models import AuditEvent
from cloud.models import Account
from clusters.models import Cluster
from kube.client import kube_client
from kube.observe import cluster_kube_observe
from sriov.models import GonePod, LeakedNic, PodNic
from sriov.reclaim import cluster_nics_reclaim
from sriov.reclaim_plan import nic_reclaim_plan
from sriov.services import leaked_nic_detach_request
from sriov.whitesky import sriov_whitesky_client
from tests.integrations.whitesky.world import nic_attached
from tests.sriov.support import CLOUDSPACE, NETWORK_ID, SRIOV_SUBJECT, World

GRACE = timedelta(minutes=5)


def observe(world: World) -> bool:
    cluster = Cluster.objects.get(pk=world.cluster.pk)
    with kube_client(cluster) as client:
        return cluster_kube_observe(client=client, cluster=cluster).complete


def delete_pod(world: World, name: str) -> None:
    requests.delete(
        f"{world.kube_server}/api/v1/namespaces/default/pods/{name}",
        headers={"Authorization": f"Bearer {world.kube_token}"},
        timeout=5,
        verify=world.kube_cluster.ca_file,
    ).raise_for_status()


def reclaim(world: World, *, after: timedelta = timedelta(0)):  # type: ignore[no-untyped-def]
    return cluster_nics_reclaim(
        cluster=Cluster.objects.get(pk=world.cluster.pk), now=timezone.now() + after, grace=GRACE
    )


def test_a_pod_that_died_without_del_loses_its_nic_after_grace_not_before(world: World) -> None:
    world.pod("web")
    world.pod("stays")
    gone = world.add("web")
    kept = world.add("stays")
    delete_pod(world, "web")
    assert observe(world)
    first = reclaim(world)
    gone.refresh_from_db()
    assert gone.state == PodNic.State.ATTACHED and gone.pod_gone_since is not None
    assert first.released == []
    assert reclaim(world, after=GRACE - timedelta(seconds=5)).released == []
    assert len(world.sim_nics(world.vm(0))) == 2
    done = reclaim(world, after=GRACE + timedelta(seconds=1))
    assert done.released == [str(gone)]
    gone.refresh_from_db()
    kept.refresh_from_db()
    assert gone.state == PodNic.State.RELEASED
    assert kept.state == PodNic.State.ATTACHED and kept.pod_gone_since is None
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [kept.mac]
    audit = AuditEvent.objects.get(action="sriov.nic_release")
    assert audit.actor_name == "sriov-reclaim" and "its pod is gone" in audit.reason


def test_a_finished_pod_loses_its_nic_after_grace(world: World) -> None:
    world.pod("job")
    nic = world.add("job")
    world.pod("job", phase="Succeeded")
    assert observe(world)
    reclaim(world)
    assert reclaim(world, after=GRACE + timedelta(seconds=1)).released == [str(nic)]
    assert world.sim_nics(world.vm(0)) == []


def test_nothing_is_reclaimed_from_a_partial_pod_listing(world: World) -> None:
    world.pod("web")
    nic = world.add("web")
    delete_pod(world, "web")
    world.kube.fault(operation="list pods", status=503)
    assert not observe(world)
    assert reclaim(world, after=GRACE * 10).released == []
    nic.refresh_from_db()
    assert nic.state == PodNic.State.ATTACHED and nic.pod_gone_since is None
    assert len(world.sim_nics(world.vm(0))) == 1


def test_a_nic_asked_for_after_the_last_listing_is_not_judged_by_it(world: World) -> None:
    assert observe(world)  # the pod does not exist yet
    world.pod("late")
    nic = world.add("late")  # the mirror lags; Kubernetes itself says the pod is there
    assert reclaim(world, after=GRACE * 10).released == []
    nic.refresh_from_db()
    assert nic.pod_gone_since is None


def test_a_pod_seen_again_clears_its_flag(world: World) -> None:
    """The flag is reclaim's own row (GonePod): raising and clearing it leaves the NIC's
    row, the agent's and the reclaim act's, as it was."""
    world.pod("web")
    nic = world.add("web")
    nic.refresh_from_db()
    written = nic.updated_at
    delete_pod(world, "web")
    assert observe(world)
    reclaim(world)
    nic.refresh_from_db()
    assert nic.pod_gone_since is not None
    assert GonePod.objects.get().pod_uid == nic.pod_uid
    world.kube.put("demo", world.pods["web"])  # back (same uid), e.g. a listing glitch
    assert observe(world)
    reclaim(world)
    nic.refresh_from_db()
    assert nic.pod_gone_since is None
    assert not GonePod.objects.exists()
    assert nic.updated_at == written  # the NIC row was not written by either


def _leak(world: World) -> str:
    """A NIC on the SR-IOV network of VM 0 that no pod owns; its MAC."""
    config = world.cluster.sriov
    with sriov_whitesky_client(config) as client:
        nic = nic_attached(
            client, cloudspace_id=CLOUDSPACE, vm_id=world.vm(0), external_network_id=NETWORK_ID
        )
    return nic.mac


def test_a_leaked_nic_is_flagged_and_detached_after_grace_when_the_account_allows(
    world: World,
) -> None:
    mac = _leak(world)
    observe(world)
    first = reclaim(world)
    assert [row.mac for row in LeakedNic.objects.all()] == [mac]
    assert first.leaks_detached == []
    world.sim.clear_calls()
    done = reclaim(world, after=GRACE + timedelta(seconds=1))
    assert done.leaks_detached == [mac]
    assert LeakedNic.objects.count() == 0
    assert world.sim_nics(world.vm(0)) == []
    assert {c["subject"] for c in world.sim.calls()["calls"]} == {SRIOV_SUBJECT}
    assert AuditEvent.objects.filter(action="sriov.leaked_nic_detach").count() == 1


def test_a_leaked_nic_waits_for_a_person_when_the_account_does_not_allow(
    world: World,
    django_user_model,  # type: ignore[no-untyped-def]
) -> None:
    Account.objects.filter(pk=world.account.pk).update(orphan_auto_release=False)
    mac = _leak(world)
    reclaim(world)
    assert reclaim(world, after=GRACE * 3).leaks_detached == []
    assert len(world.sim_nics(world.vm(0))) == 1
    person = django_user_model.objects.create_superuser("root", password="x")
    leaked_nic_detach_request(nic=LeakedNic.objects.get(), actor=person, reason="not ours")
    assert reclaim(world, after=GRACE * 3).leaks_detached == [mac]
    event = AuditEvent.objects.get(action="sriov.leaked_nic_detach")
    assert (event.actor_name, event.reason) == ("root", "not ours")


@pytest.mark.parametrize("auto_release", [True, False])
def test_a_detach_a_person_asked_for_happens_on_the_next_pass_not_after_grace(
    world: World,
    django_user_model,  # type: ignore[no-untyped-def]
    auto_release: bool,
) -> None:
    Account.objects.filter(pk=world.account.pk).update(orphan_auto_release=auto_release)
    mac = _leak(world)
    reclaim(world)  # finds it
    assert [row.mac for row in LeakedNic.objects.all()] == [mac]
    person = django_user_model.objects.create_superuser("root", password="x")
    leaked_nic_detach_request(nic=LeakedNic.objects.get(), actor=person, reason="not ours")
    cluster = Cluster.objects.get(pk=world.cluster.pk)
    planned = nic_reclaim_plan(cluster, now=timezone.now(), grace=GRACE)
    assert [(step.kind, step.mac, step.reason) for step in planned] == [
        ("leaked_nic_detach", mac, "not ours")
    ]
    assert reclaim(world).leaks_detached == [mac]  # seconds after it was found
    assert world.sim_nics(world.vm(0)) == []
    event = AuditEvent.objects.get(action="sriov.leaked_nic_detach")
    assert (event.actor_name, event.reason) == ("root", "not ours")


def test_nics_owned_by_pods_are_not_leaks(world: World) -> None:
    world.pod("web")
    world.add("web")
    observe(world)
    assert reclaim(world, after=GRACE * 3).leaked == []
    assert LeakedNic.objects.count() == 0


def test_a_second_pass_over_nothing_changed_writes_nothing(world: World) -> None:
    world.pod("web")
    world.add("web")
    observe(world)
    reclaim(world)
    world.sim.clear_calls()
    with CaptureQueriesContext(connection) as queries:
        reclaim(world)
    assert world.sim.calls()["writes"] == 0
    writes = [q["sql"] for q in queries if q["sql"].split()[0] in ("INSERT", "UPDATE", "DELETE")]
    assert writes == []


def test_a_location_of_the_cluster_without_the_network_is_no_error(world: World) -> None:
    from cloud.models import Location
    from clusters.models import ClusterSite

    be = Location.objects.get(account=world.account, name="be-mac-dc01-001")
    ClusterSite.objects.create(
        cluster=world.cluster, location=be, cloudspace_id="cs-demo-be", image_id=21
    )
    result = reclaim(world)
    assert result.errors == []
    # Its networks are mirrored all the same (the address-use page lists them).
    from sriov.models import ExternalNetwork

    assert ExternalNetwork.objects.filter(location=be, name="sriov-be-mac").exists()
