"""What a page and Prometheus read of SR-IOV: NICs per state, each VM's queue, attach
latency, address use."""

from __future__ import annotations

from typing import Any

from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from sriov.agent import pod_nic_delete
from sriov.selectors import network_address_use, pod_nics, vm_queues
from tests.factories import UserFactory
from tests.sriov.support import NETWORK, World


def samples(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }


def test_metrics_count_nics_per_state_and_attach_times(
    world: World, client: Client, settings: Any
) -> None:
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]
    from capvco_web.counters import counters

    before = counters().read("sriov_attach_seconds_bucket").get(("+Inf",), 0)
    world.pod("a")
    world.pod("b")
    world.add("a")
    world.add("b")
    found = samples(client)
    assert found[("capvco_sriov_nics", (("state", "attached"),))] == 2
    assert found[("capvco_sriov_nics", (("state", "requested"),))] == 0
    assert found[("capvco_sriov_attach_seconds_count", ())] == before + 2
    assert found[("capvco_sriov_queued", ())] == 0
    assert found[("capvco_sriov_leaked_nics", ())] == 0


def test_a_waiting_request_shows_in_its_vms_queue(world: World) -> None:
    world.pod("web")
    world.request("web")  # queued; no worker has run its VM's queue
    person = UserFactory(is_superuser=True)
    (queue,) = vm_queues(person)
    assert (queue.vm_id, queue.length, queue.node_name) == (world.vm(0), 1, "node-0")
    assert [row.pod_name for row in queue.waiting] == ["web"]
    assert vm_queues(UserFactory()) == []  # a user of no account sees none


def test_a_waiting_detach_shows_in_its_vms_queue_after_the_attach_before_it(
    world: World, client: Client, settings: Any
) -> None:
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]
    world.pod("web")
    world.pod("db")
    world.add("web")
    world.request("db")  # queued first
    pod_nic_delete(
        cluster=world.cluster,
        node_name=world.node(0),
        pod_uid=world.uid("web"),
        container_id="sandbox-web",
        ifname="net1",
    )  # its detach queued after db's attach; no worker has run the VM's queue
    (queue,) = vm_queues(UserFactory(is_superuser=True))
    assert queue.length == 2 and queue.in_turn == []
    assert [row.pod_name for row in queue.waiting] == ["db", "web"]
    assert queue.oldest_wait_since == queue.waiting[0].requested_at
    assert samples(client)[("capvco_sriov_queued", ())] == 2


def test_address_use_per_location_counts_the_nics_holding_one(world: World) -> None:
    from sriov.reclaim import cluster_nics_reclaim

    world.pod("web")
    world.add("web")
    cluster_nics_reclaim(cluster=world.cluster)  # lists networks and their free addresses
    person = UserFactory(is_superuser=True)
    use = {u.name: u for u in network_address_use(person)}
    assert use[NETWORK].nics == 1
    assert use[NETWORK].free_addresses is not None and use[NETWORK].free_addresses > 200
    assert [n.pod_name for n in pod_nics(person, live_only=True)] == ["web"]
