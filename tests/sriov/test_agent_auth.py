"""Who may call the agent API, for what: node tokens bound to one node of one cluster,
exchanged by each node's installer for the cluster's enrollment token; the agent API's own
limits (a valid token is never refused for others' failures); what another cluster's
token and a path that is no pod uid get."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from clusters.models import Cluster, Machine
from kube.client import kube_client
from kube.observe import cluster_kube_observe
from sriov.agent import vm_queue_run
from sriov.cni.install import EnrollFailed, enroll, install
from sriov.models import AgentToken, PodNic
from sriov.tokens import agent_token_rotate, agent_tokens_forget, node_token_revoke
from tests.factories import MembershipFactory, UserFactory
from tests.kube_sim import node_object
from tests.sriov.support import CLOUDSPACE, KEY, World, add_body, agent_add, agent_delete

NICS = "/api/v1/sriov/agent/nics/"
ENROLL = "/api/v1/sriov/agent/enroll/"


def bearer(token: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def add(client: Client, body: dict[str, Any]) -> Any:
    return agent_add(client, body)


def enroll_call(token: str, node: str, current: str = "") -> Any:
    return bearer(token).post(
        ENROLL, {"node_name": node, "current_token": current}, content_type="application/json"
    )


def as_role(world: World, role: str) -> Client:
    user = UserFactory()
    MembershipFactory(user=user, account=world.account, role=role)
    client = Client()
    client.force_login(user)
    return client


# --- a node acts for its own pods only ------------------------------------------------------


def test_node_a_token_cannot_delete_node_b_pods_nic(world: World) -> None:
    world.pod("web", node=1)
    nic = add(bearer(world.node_token(1)), add_body(world, "web", node=1))
    assert nic.status_code == 200, nic.content
    uid = world.uid("web")
    node_a = bearer(world.node_token(0))
    refused = node_a.delete(f"{NICS}{uid}/{KEY}")
    assert refused.status_code == 403
    assert refused.json()["code"] == "other_node"
    assert set(refused.json()) == {"detail", "code"}
    assert node_a.get(f"{NICS}{uid}/{KEY}").status_code == 403
    assert PodNic.objects.get(pod_uid=uid).state == PodNic.State.ATTACHED
    assert len(world.sim_nics(world.vm(1))) == 1
    assert not AuditEvent.objects.filter(action="sriov.nic_release").exists()
    # The node that holds it detaches it.
    assert agent_delete(bearer(world.node_token(1)), f"{NICS}{uid}/{KEY}").status_code == 204
    assert world.sim_nics(world.vm(1)) == []


GC = "/api/v1/sriov/agent/gc/"


def gc(client: Client, **body: Any) -> Any:
    return client.post(
        GC, {"cni_network": "capvco-sriov", "valid_attachments": [], **body},
        content_type="application/json",
    )  # fmt: skip


def test_gc_is_of_the_tokens_node_only(
    world: World, other: tuple[Cluster, str], settings: Any
) -> None:
    settings.SRIOV_RECLAIM_GRACE_SECONDS = 0
    world.pod("web")
    world.pod("db", node=1)
    web = world.add("web", container_id="c1", cni_network="capvco-sriov")
    db = world.add("db", node=1, container_id="c2", cni_network="capvco-sriov")
    node_0 = bearer(world.node_token(0))
    # A body that names another node than the token's changes nothing.
    refused = gc(node_0, node_name=world.node(1))
    assert refused.status_code == 403 and refused.json()["code"] == "other_node"
    # Another cluster's node of the same name releases nothing of this cluster.
    assert gc(bearer(other[1]), node_name="node-0").json()["released"] == []
    assert PodNic.objects.exclude(state=PodNic.State.ATTACHED).count() == 0
    assert not AuditEvent.objects.filter(action="sriov.nic_release").exists()
    # Its own node, named or not: only its own NICs go (queued on the VM, then detached).
    answer = gc(node_0)
    assert answer.status_code == 200 and len(answer.json()["detaching"]) == 1
    assert answer.json()["released"] == []
    vm_queue_run(location_id=web.location_id, vm_id=web.vm_id)
    web.refresh_from_db()
    db.refresh_from_db()
    assert (web.state, db.state) == (PodNic.State.RELEASED, PodNic.State.ATTACHED)
    assert world.sim_nics(world.vm(0)) == [] and len(world.sim_nics(world.vm(1))) == 1
    assert gc(bearer(world.node_token(1)), node_name=world.node(1)).status_code == 200
    vm_queue_run(location_id=db.location_id, vm_id=db.vm_id)
    db.refresh_from_db()
    assert db.state == PodNic.State.RELEASED


def test_another_node_cannot_check_or_delete_any_attachment_of_a_pod_it_does_not_hold(
    world: World,
) -> None:
    world.pod("web", node=1)
    assert add(bearer(world.node_token(1)), add_body(world, "web", node=1)).status_code == 200
    uid = world.uid("web")
    node_0 = bearer(world.node_token(0))
    for key in (KEY, "?container_id=0ld&ifname=net1"):
        assert node_0.get(f"{NICS}{uid}/{key}").status_code == 403
        assert node_0.delete(f"{NICS}{uid}/{key}").json()["code"] == "other_node"
    assert PodNic.objects.get(pod_uid=uid).state == PodNic.State.ATTACHED
    assert len(world.sim_nics(world.vm(1))) == 1


def test_a_node_token_asks_only_for_pods_on_its_own_node(world: World) -> None:
    world.pod("web", node=1)
    refused = add(bearer(world.node_token(0)), add_body(world, "web", node=1))
    assert refused.status_code == 403
    assert refused.json()["code"] == "other_node"
    assert "node node-0's" in refused.json()["detail"]
    assert not PodNic.objects.exists()
    assert world.sim_nics(world.vm(0)) == world.sim_nics(world.vm(1)) == []


def test_the_enrollment_token_only_enrolls(world: World) -> None:
    world.pod("web")
    refused = add(bearer(world.enrollment_token), add_body(world, "web"))
    assert refused.status_code == 403
    assert "enrollment token" in refused.json()["detail"]
    assert (
        bearer(world.enrollment_token).delete(f"{NICS}{world.uid('web')}/{KEY}").status_code == 403
    )
    # And a node token does not enroll.
    assert enroll_call(world.node_token(0), world.node(1)).status_code == 403
    assert not PodNic.objects.exists()


# --- enrolling ------------------------------------------------------------------------------


def test_a_node_enrolls_once_and_again_only_with_its_current_token(world: World) -> None:
    first = enroll_call(world.enrollment_token, world.node(0))
    assert first.status_code == 201, first.content
    token = first.json()["token"]
    assert first.json()["node_name"] == world.node(0)
    # Another node (it can read the same Secret) cannot take node-0's name.
    taken = enroll_call(world.enrollment_token, world.node(0))
    assert taken.status_code == 409 and taken.json()["code"] == "node_enrolled"
    wrong = enroll_call(world.enrollment_token, world.node(0), current=world.node_token(1))
    assert wrong.status_code == 409
    assert AgentToken.objects.filter(node_name=world.node(0)).count() == 1
    # The node itself, with its token: a new one; the old keeps working a little while.
    again = enroll_call(world.enrollment_token, world.node(0), current=token)
    assert again.status_code == 201
    new = again.json()["token"]
    world.pod("web")
    assert add(bearer(token), add_body(world, "web")).status_code == 200
    AgentToken.objects.filter(node_name=world.node(0), expires_at__isnull=False).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    agent_tokens_forget()  # the overlap has passed: read again, as past the cache's time
    retired = bearer(token).get(f"{NICS}{world.uid('web')}/{KEY}")
    assert retired.status_code == 401 and "retired" in retired.json()["detail"]
    assert bearer(new).get(f"{NICS}{world.uid('web')}/{KEY}").status_code == 200
    events = AuditEvent.objects.filter(action="sriov.node_token_enroll", after__node=world.node(0))
    assert events.count() == 2
    assert token not in str([e.after for e in events]) and new not in str([e.after for e in events])


def test_a_node_token_goes_with_its_machine_and_a_new_machine_of_the_name_enrolls(
    world: World,
) -> None:
    old_token = world.node_token(0)
    machine = world.machines[0]
    pool = machine.pool
    # Torn down: the machine's row goes, and its node's token with it.
    machine.delete()
    world.pod("web")
    assert add(bearer(old_token), add_body(world, "web")).status_code == 401
    # Scaled up again: a machine of the same name, a new VM, its node named as before.
    vm_id = world.sim.seed(CLOUDSPACE, vms=1, prefix="capvco-demo-again")["vm_ids"][0]
    Machine.objects.create(pool=pool, name=machine.name, index=0, vm_id=vm_id, phase="running")
    world.kube.put(
        "demo", node_object("node-0", provider_id=f"vco://{world.location.name}/{vm_id}")
    )
    enrolled = enroll_call(world.enrollment_token, "node-0")
    assert enrolled.status_code == 201, enrolled.content
    assert AgentToken.objects.get(node_name="node-0").machine.vm_id == vm_id  # type: ignore[union-attr]


def test_two_enrollments_of_one_node_at_once_make_one_token(world: World, live_server: Any) -> None:
    import requests

    statuses: list[int] = []
    start = threading.Barrier(4)

    def one() -> None:
        start.wait()
        answer = requests.post(
            f"{live_server.url}{ENROLL}",
            json={"node_name": world.node(1)},
            headers={"Authorization": f"Bearer {world.enrollment_token}"},
            timeout=30,
        )
        statuses.append(answer.status_code)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [201, 409, 409, 409]
    assert AgentToken.objects.filter(node_name=world.node(1)).count() == 1


def test_only_a_machine_of_the_cluster_enrolls(world: World, other: tuple[Cluster, str]) -> None:
    world.kube.put("demo", node_object("stray"))  # a node that is none of its machines
    for node in ("stray", "no-such-node"):
        refused = enroll_call(world.enrollment_token, node)
        assert refused.status_code == 409, refused.content
        assert set(refused.json()) == {"detail", "code"}
    assert not AgentToken.objects.filter(cluster=world.cluster).exclude(node_name="").exists()


def test_a_rotated_enrollment_token_no_longer_enrolls_and_node_tokens_stay(world: World) -> None:
    node_token = world.node_token(0)
    old = world.enrollment_token
    _, new = agent_token_rotate(cluster=world.cluster, actor=SystemActor.RECONCILER)
    refused = enroll_call(old, world.node(1))
    assert refused.status_code == 401
    assert enroll_call(new, world.node(1)).status_code == 201
    world.pod("web")
    assert add(bearer(node_token), add_body(world, "web")).status_code == 200


def test_revoking_a_nodes_tokens_lets_a_new_machine_take_the_name(world: World) -> None:
    node_token = world.node_token(0)
    path = f"/api/v1/sriov/clusters/{world.cluster.pk}/node-token-revoke/"
    body = {"node_name": world.node(0), "reason": "machine replaced"}
    assert as_role(world, "operator").post(path, body, "application/json").status_code == 403
    revoked = as_role(world, "admin").post(path, body, "application/json")
    assert revoked.status_code == 200, revoked.content
    assert revoked.json() == {"node_name": world.node(0), "revoked": 1}
    world.pod("web")
    assert add(bearer(node_token), add_body(world, "web")).status_code == 401
    assert enroll_call(world.enrollment_token, world.node(0)).status_code == 201
    event = AuditEvent.objects.get(action="sriov.node_token_revoke")
    assert event.reason == "machine replaced" and event.before["node"] == world.node(0)


def test_node_tokens_are_listed_without_their_secret(world: World) -> None:
    raw = world.node_token(1)
    answer = as_role(world, "viewer").get(f"/api/v1/sriov/clusters/{world.cluster.pk}/")
    assert answer.status_code == 200
    tokens = answer.json()["agent_tokens"]
    assert [(t["kind"], t["node_name"]) for t in tokens] == [
        ("enrollment", ""),
        ("node", world.node(1)),
    ]
    assert raw not in answer.content.decode()
    assert world.enrollment_token not in answer.content.decode()
    assert tokens[1]["prefix"] == raw[: len(tokens[1]["prefix"])]


# --- the installer --------------------------------------------------------------------------


def test_the_installer_enrolls_its_node_and_keeps_the_token_private(
    world: World, live_server: Any, tmp_path: Path
) -> None:
    secret = tmp_path / "secret-token"
    secret.write_text(world.enrollment_token + "\n")
    conf = tmp_path / "conf"
    options = {
        "bin_dir": tmp_path / "bin",
        "conf_dir": conf,
        "token_file": secret,
        "node_name": world.node(0),
        "agent_url": f"{live_server.url}/api/v1/sriov/agent/",
    }
    changed = install(**options)
    assert str(conf / "token") in changed and str(conf / "node-name") in changed
    assert conf.stat().st_mode & 0o777 == 0o700
    assert (conf / "token").stat().st_mode & 0o777 == 0o600
    assert (conf / "node-name").read_text() == f"{world.node(0)}\n"
    token = (conf / "token").read_text().strip()
    assert token != world.enrollment_token
    assert AgentToken.objects.get(node_name=world.node(0)).enrolled_from == "127.0.0.1"
    world.pod("web")
    assert add(bearer(token), add_body(world, "web")).status_code == 200
    assert install(**options) == []  # nothing changed: no enrollment either
    assert AuditEvent.objects.filter(action="sriov.node_token_enroll").count() == 1
    # A rotation: the new Secret makes the installer enroll again with its node token.
    _, rotated = agent_token_rotate(cluster=world.cluster, actor=SystemActor.RECONCILER)
    secret.write_text(rotated + "\n")
    assert str(conf / "token") in install(**options)
    assert (conf / "token").read_text().strip() != token
    assert AuditEvent.objects.filter(action="sriov.node_token_enroll").count() == 2


class _Redirecting(http.server.BaseHTTPRequestHandler):
    seen: list[str | None]
    target = ""

    def do_POST(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        if self.target:
            self.send_response(307)
            self.send_header("Location", self.target)
        else:
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def redirecting() -> Iterator[tuple[str, list[str | None]]]:
    """A listener that records the Authorization it gets, and one that redirects to it."""
    seen_there: list[str | None] = []
    seen_here: list[str | None] = []
    there = http.server.HTTPServer(
        ("127.0.0.1", 0), type("There", (_Redirecting,), {"seen": seen_there})
    )
    url_there = f"http://127.0.0.1:{there.server_port}/steal"
    here = http.server.HTTPServer(
        ("127.0.0.1", 0),
        type("Here", (_Redirecting,), {"seen": seen_here, "target": url_there}),
    )
    for server in (there, here):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{here.server_port}/agent/", seen_there
    for server in (there, here):
        server.shutdown()


def test_the_installer_follows_no_redirect(
    redirecting: tuple[str, list[str | None]],
) -> None:
    url, seen_there = redirecting
    with pytest.raises(EnrollFailed, match="HTTP 307"):
        enroll(agent_url=url, enrollment_token="cvsriov_abc_def", node_name="n", current_token="")
    assert seen_there == []


# --- the agent API's own limits -------------------------------------------------------------


def test_bad_tokens_from_one_address_never_throttle_a_valid_agent_token(world: World) -> None:
    world.pod("web")
    node = bearer(world.agent_token)
    for _ in range(12):
        bearer("capvco_000000000000_guess").get("/api/v1/clusters/")
        bearer("capvco_000000000000_guess").post(NICS, {}, content_type="application/json")
    guessing = bearer("cvsriov_000000000000_guess").get(f"{NICS}{world.uid('web')}/{KEY}")
    assert guessing.status_code == 429
    assert int(guessing["Retry-After"]) > 0
    answered = add(node, add_body(world, "web"))
    assert answered.status_code == 200, answered.content
    assert node.get(f"{NICS}{world.uid('web')}/{KEY}").status_code == 200


def test_calls_per_node_token_are_limited_and_other_nodes_are_not(
    world: World, settings: Any
) -> None:
    rates = {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "sriov_agent": "3/minute"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    world.pod("web")
    node_0 = bearer(world.node_token(0))
    uid = world.uid("web")
    assert [node_0.get(f"{NICS}{uid}/{KEY}").status_code for _ in range(3)] == [404] * 3
    throttled = node_0.get(f"{NICS}{uid}/{KEY}")
    assert throttled.status_code == 429 and "Retry-After" in throttled
    assert bearer(world.node_token(1)).get(f"{NICS}{uid}/{KEY}").status_code == 404


# --- paths that are no pod uid --------------------------------------------------------------


@pytest.mark.parametrize("uid", ["%00", "a%00b", "x" * 65, "not%20a%20uid", "%C3%A9"])
def test_a_path_that_is_no_pod_uid_is_a_404_in_the_error_shape(world: World, uid: str) -> None:
    world.pod("web")
    node = bearer(world.agent_token)
    assert add(node, add_body(world, "web")).status_code == 200
    for method in (node.get, node.delete):
        answer = method(f"{NICS}{uid}/{KEY}")
        assert answer.status_code == 404, answer.content
        assert set(answer.json()) == {"detail", "code"}
        assert "pod uid" in answer.json()["detail"]
    assert PodNic.objects.get().state == PodNic.State.ATTACHED


# --- another cluster's token learns nothing -------------------------------------------------


def test_another_clusters_token_is_answered_as_for_a_pod_that_does_not_exist(
    world: World, other: tuple[Cluster, str]
) -> None:
    world.pod("web")
    assert add(bearer(world.agent_token), add_body(world, "web")).status_code == 200
    with kube_client(world.cluster) as client:  # the pod is in demo's mirror too
        cluster_kube_observe(client=client, cluster=world.cluster)
    _, other_token = other
    intruder = bearer(other_token)
    uid = world.uid("web")
    ghost = {**add_body(world, "web"), "pod_uid": "00000000-0000-0000-0000-00000000dead"}
    theirs, nobodys = add(intruder, add_body(world, "web")), add(intruder, ghost)
    assert theirs.status_code == nobodys.status_code == 404
    assert theirs.json() == nobodys.json()
    assert "demo" not in theirs.content.decode()
    check, check_ghost = (
        intruder.get(f"{NICS}{uid}/{KEY}"),
        intruder.get(f"{NICS}{ghost['pod_uid']}/{KEY}"),
    )
    assert check.status_code == check_ghost.status_code == 404
    assert check.json()["code"] == check_ghost.json()["code"]
    assert check.json()["detail"].replace(uid, "X") == check_ghost.json()["detail"].replace(
        ghost["pod_uid"], "X"
    )
    assert intruder.delete(f"{NICS}{uid}/{KEY}").status_code == 204  # as for a pod with no NIC
    assert PodNic.objects.get(pod_uid=uid).state == PodNic.State.ATTACHED
    assert len(world.sim_nics(world.vm(0))) == 1


def test_a_token_revoked_elsewhere_is_refused_once_the_cache_time_has_passed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sriov import tokens

    token = world.node_token(0)
    assert tokens.agent_token_authenticate(token).node_name == world.node(0)
    # Revoked by another web process: its rows gone, this process's cache not told.
    AgentToken.objects.filter(node_name=world.node(0)).delete()
    assert tokens.agent_token_authenticate(token).node_name == world.node(0)  # cached
    later = tokens._cache.clock() + tokens.AGENT_TOKEN_CACHE_SECONDS
    monkeypatch.setattr(tokens._cache, "clock", lambda: later)
    with pytest.raises(tokens.AgentTokenRefused, match="Invalid agent token"):
        tokens.agent_token_authenticate(token)


def test_a_token_revoked_in_this_process_is_refused_at_once(world: World) -> None:
    from sriov import tokens

    token = world.node_token(0)
    assert tokens.agent_token_authenticate(token).node_name == world.node(0)
    node_token_revoke(
        cluster=world.cluster, node_name=world.node(0), actor=SystemActor.RECONCILER, reason="gone"
    )
    with pytest.raises(tokens.AgentTokenRefused, match="Invalid agent token"):
        tokens.agent_token_authenticate(token)


def test_a_cached_token_costs_no_query(world: World) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from sriov import tokens

    token = world.node_token(0)
    tokens.agent_token_authenticate(token)
    with CaptureQueriesContext(connection) as queries:
        tokens.agent_token_authenticate(token)
    assert len(queries) == 0
