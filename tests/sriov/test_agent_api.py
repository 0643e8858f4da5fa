"""The agent API as the CNI plugin calls it: ADD, CHECK and DEL of an attachment
(container id, ifname) of a pod, and GC, with the cluster's agent token; what another
cluster's token, another node, or an unknown pod get."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

from capvco_web.audit import SystemActor
from clusters.models import Cluster
from sriov.agent import vm_queue_run
from sriov.models import PodNic
from sriov.services import sriov_config_set
from sriov.tokens import agent_token_rotate, agent_tokens_forget
from tests.sriov.support import KEY, NETWORK, World, add_body, agent_add, agent_delete

URL = "/api/v1/sriov/agent/nics/"


def agent(client: Client, token: str) -> Client:
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client


def test_add_answers_what_the_plugin_configures_and_a_repeat_the_same_nic(
    world: World, client: Client
) -> None:
    world.pod("web")
    agent(client, world.agent_token)
    queued = client.post(URL, add_body(world, "web"), content_type="application/json")
    assert queued.status_code == 202, queued.content
    assert queued.json()["state"] == "requested" and queued.json()["queue_position"] == 1
    assert int(queued["Retry-After"]) >= 1
    vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))  # the worker
    first = client.post(URL, add_body(world, "web"), content_type="application/json")
    assert first.status_code == 200, first.content
    nic = first.json()
    assert nic["state"] == "attached"
    assert nic["address"].startswith("10.50.0.")
    assert (nic["prefix"], nic["gateway"], nic["mtu"], nic["network"]) == (
        24,
        "10.50.0.1",
        1500,
        NETWORK,
    )
    again = client.post(URL, add_body(world, "web"), content_type="application/json")
    assert again.json() == nic
    assert len(world.sim_nics(world.vm(0))) == 1
    check = client.get(f"{URL}{nic['pod_uid']}/{KEY}")
    assert check.json()["mac"] == nic["mac"]


def test_del_detaches_and_a_repeated_del_is_fine(world: World, client: Client) -> None:
    world.pod("web")
    agent(client, world.agent_token)
    nic = agent_add(client, add_body(world, "web")).json()
    # DEL queues the detach on the VM and answers at once; the poll says where it is.
    queued = client.delete(f"{URL}{nic['pod_uid']}/{KEY}")
    assert queued.status_code == 202 and queued.json()["queue_position"] == 1
    assert queued.headers["Retry-After"] == "1"
    assert len(world.sim_nics(world.vm(0))) == 1
    polled = client.get(f"{URL}{nic['pod_uid']}/{KEY}")
    assert polled.status_code == 202 and polled.json()["queue_position"] == 1
    assert agent_delete(client, f"{URL}{nic['pod_uid']}/{KEY}").status_code == 204
    assert world.sim_nics(world.vm(0)) == []
    assert PodNic.objects.get(pod_uid=nic["pod_uid"]).state == PodNic.State.RELEASED
    assert client.delete(f"{URL}{nic['pod_uid']}/{KEY}").status_code == 204
    assert client.get(f"{URL}{nic['pod_uid']}/{KEY}").status_code == 404


def test_a_pod_on_another_node_is_refused(world: World, client: Client) -> None:
    world.pod("web", node=1)
    response = agent(client, world.agent_token).post(
        URL, add_body(world, "web", node=0), content_type="application/json"
    )
    assert response.status_code == 403
    assert "runs on node node-1, not on node-0" in response.json()["detail"]
    assert world.sim_nics(world.vm(0)) == world.sim_nics(world.vm(1)) == []


def test_an_unknown_pod_is_refused(world: World, client: Client) -> None:
    body = {
        "pod_uid": "00000000-0000-0000-0000-00000000dead",
        "namespace": "default",
        "pod_name": "ghost",
        "node_name": "node-0",
        "container_id": "c0ffee",
        "ifname": "net1",
    }
    response = agent(client, world.agent_token).post(URL, body, content_type="application/json")
    assert response.status_code == 404
    assert "no pod default/ghost" in response.json()["detail"]


def test_a_token_of_another_cluster_cannot_touch_this_clusters_pods(
    world: World, client: Client, other: tuple[Cluster, str]
) -> None:
    world.pod("web")
    agent(client, world.agent_token)
    nic = agent_add(client, add_body(world, "web")).json()
    _, other_token = other
    agent(client, other_token)
    # Its own node names the same: the pod is still not its own, and not even seen.
    refused = client.post(URL, add_body(world, "web"), content_type="application/json")
    assert refused.status_code == 404
    assert "demo" not in refused.json()["detail"]
    assert client.delete(f"{URL}{nic['pod_uid']}/{KEY}").status_code == 204  # nothing done
    assert client.get(f"{URL}{nic['pod_uid']}/{KEY}").status_code == 404
    assert PodNic.objects.get(pod_uid=nic["pod_uid"]).state == PodNic.State.ATTACHED
    assert len(world.sim_nics(world.vm(0))) == 1


def test_calls_without_a_valid_agent_token_are_refused(world: World, client: Client) -> None:
    world.pod("web")
    assert (
        client.post(URL, add_body(world, "web"), content_type="application/json").status_code == 401
    )
    agent(client, "cvsriov_000000000000_wrong")
    assert (
        client.post(URL, add_body(world, "web"), content_type="application/json").status_code == 401
    )
    # A person's API token is not an agent token.
    agent(client, "capvco_000000000000_secret")
    assert (
        client.post(URL, add_body(world, "web"), content_type="application/json").status_code == 401
    )
    assert world.sim_nics(world.vm(0)) == []


def test_a_rotated_enrollment_token_stops_enrolling(world: World, client: Client) -> None:
    old = world.enrollment_token
    agent_token_rotate(cluster=world.cluster, actor=SystemActor.RECONCILER)
    response = agent(client, old).post(
        "/api/v1/sriov/agent/enroll/", {"node_name": "node-0"}, content_type="application/json"
    )
    assert response.status_code == 401


def test_bad_input_is_a_400_naming_the_field(world: World, client: Client) -> None:
    response = agent(client, world.agent_token).post(
        URL, {"pod_uid": "not a uid!", "namespace": "default"}, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert {"pod_uid", "pod_name", "node_name"} <= set(response.json()["fields"])


def test_a_field_the_agent_api_does_not_take_is_refused(world: World, client: Client) -> None:
    world.pod("web")
    body = {**add_body(world, "web"), "vm_id": 1}
    response = agent(client, world.agent_token).post(URL, body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["fields"] == {"vm_id": ["Unknown field."]}
    assert not PodNic.objects.exists()


def test_add_while_sriov_is_disabled_is_refused(world: World, client: Client) -> None:
    world.pod("web")
    sriov_config_set(
        cluster=world.cluster, changes={"enabled": False}, actor=SystemActor.RECONCILER
    )
    response = agent(client, world.agent_token).post(
        URL, add_body(world, "web"), content_type="application/json"
    )
    assert response.status_code == 409
    assert "not enabled" in response.json()["detail"]


def test_a_rotation_with_overlap_keeps_the_old_token_until_then(
    world: World, client: Client
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from sriov.models import AgentToken

    enroll = "/api/v1/sriov/agent/enroll/"
    old = world.enrollment_token
    _, new = agent_token_rotate(
        cluster=world.cluster, actor=SystemActor.RECONCILER, overlap=timedelta(hours=1)
    )
    ok = agent(client, old).post(enroll, {"node_name": "node-0"}, content_type="application/json")
    assert ok.status_code == 201
    AgentToken.objects.filter(expires_at__isnull=False).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    agent_tokens_forget()  # the overlap has passed: read again, as past the cache's time
    body = {"node_name": "node-1"}
    expired = agent(client, old).post(enroll, body, content_type="application/json")
    assert expired.status_code == 401 and "retired" in expired.json()["detail"]
    assert agent(client, new).post(enroll, body, content_type="application/json").status_code == 201


def test_del_and_check_name_the_attachment(world: World, client: Client) -> None:
    world.pod("web")
    agent(client, world.agent_token)
    nic = agent_add(client, add_body(world, "web")).json()
    assert (nic["container_id"], nic["ifname"]) == ("c0ffee", "net1")
    bare = client.delete(f"{URL}{nic['pod_uid']}/")
    assert bare.status_code == 400
    assert set(bare.json()["fields"]) == {"container_id", "ifname"}
    assert client.get(f"{URL}{nic['pod_uid']}/?container_id=c0ffee&ifname=a/b").status_code == 400
    other_sandbox = f"{URL}{nic['pod_uid']}/?container_id=0ld&ifname=net1"
    assert client.get(other_sandbox).status_code == 404
    assert client.delete(other_sandbox).status_code == 204
    assert PodNic.objects.get(pod_uid=nic["pod_uid"]).state == PodNic.State.ATTACHED
    assert len(world.sim_nics(world.vm(0))) == 1


def test_gc_input_is_checked(world: World, client: Client) -> None:
    agent(client, world.agent_token)
    gc = "/api/v1/sriov/agent/gc/"
    bad = client.post(
        gc,
        {"node_name": "node-0", "cni_network": "n", "valid_attachments": [{"container_id": "c"}]},
        content_type="application/json",
    )
    assert bad.status_code == 400 and "valid_attachments" in bad.json()["fields"]
    empty = client.post(
        gc,
        {"node_name": "node-0", "cni_network": "n", "valid_attachments": []},
        content_type="application/json",
    )
    assert empty.status_code == 200
    assert empty.json() == {"released": [], "kept": [], "failed": [], "detaching": []}


def test_an_add_reads_a_mirrored_pod_from_the_mirror_a_new_one_by_get_over_one_client(
    world: World, client: Client
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from kube.client import kube_client, kube_client_shared
    from kube.observe import cluster_kube_observe

    agent(client, world.agent_token)
    world.pod("known")
    with kube_client(world.cluster) as kube:
        assert cluster_kube_observe(client=kube, cluster=world.cluster).complete
    world.pod("new")
    world.pod("newer")
    world.kube.clear_calls()
    assert (
        client.post(
            URL, {**add_body(world, "new"), "container_id": "n"}, content_type="application/json"
        ).status_code
        == 202
    )
    shared = kube_client_shared(world.cluster)
    assert (
        client.post(
            URL, {**add_body(world, "newer"), "container_id": "m"}, content_type="application/json"
        ).status_code
        == 202
    )
    assert kube_client_shared(world.cluster) is shared  # one client for both GETs
    gets = [c for c in world.kube.calls("demo") if c["method"] == "GET" and "/pods/" in c["path"]]
    assert [c["path"].rsplit("/", 1)[1] for c in gets] == ["new", "newer"]
    world.kube.clear_calls()
    with CaptureQueriesContext(connection) as add:
        answer = client.post(URL, add_body(world, "known"), content_type="application/json")
    assert answer.status_code == 202
    assert world.kube.calls("demo") == []  # the mirror answered
    # Its SR-IOV settings with its cluster, the pod's NIC so far, the mirrored pod, its
    # node with its machine, the network; the request recorded (in a savepoint: 3); its
    # place in the queue and the VM's attach time. The agent token is not read again.
    assert len(add) == 10, [q["sql"][:80] for q in add.captured_queries]
    with CaptureQueriesContext(connection) as poll:
        polled = client.get(f"{URL}{world.uid('known')}/{KEY}")
    assert polled.status_code == 202
    assert len(poll) == 3, [q["sql"][:80] for q in poll.captured_queries]  # NIC, place, time


def test_a_refusal_to_try_again_later_is_a_warning_not_a_server_error(
    world: World, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    # The cluster's Kubernetes cannot be asked about a pod not mirrored yet: a 503 the plugin
    # waits out (Retry-After), which says why; not an error of ours in the log.
    agent(client, world.agent_token)
    world.pod("new")
    world.kube.fault(operation="*", status=503)

    with caplog.at_level(logging.INFO):
        answer = client.post(URL, add_body(world, "new"), content_type="application/json")

    assert answer.status_code == 503 and answer.json()["code"] == "kubernetes_unavailable"
    assert int(answer["Retry-After"]) >= 1
    said = [(r.levelname, r.name, r.getMessage()) for r in caplog.records]
    assert not [s for s in said if s[0] in ("ERROR", "CRITICAL")], said
    assert [s for s in said if s[0] == "WARNING" and "kubernetes_unavailable" in s[2]], said
