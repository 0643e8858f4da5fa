"""ADD records the request and answers at once; the VM's queue task attaches, one at a
time per VM, in order, with two NIC listings per attach; the plugin's poll reads the
outcome. Against the whitesky simulator and the fake Kubernetes API over HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.test import Client
from django.utils import timezone

from capvco_web.integrations import whitesky as ws
from capvco_web.locks import object_lock
from cloud.whitesky import whitesky_client
from sriov.agent import Clients, vm_lock_name, vm_queue_run
from sriov.models import PodNic
from sriov.tasks import sriov_vm_queues_resume
from sriov.whitesky import sriov_whitesky_client
from tests.sriov.support import CLOUDSPACE, World, add_body

URL = "/api/v1/sriov/agent/nics/"
ATTACH = "attachExternalNetworksVirtualMachine"
LIST = "listExternalNetworksVirtualMachine"
State = PodNic.State
RunTasks = Callable[[], AbstractContextManager[None]]


def agent(client: Client, token: str) -> Client:
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client


def body(world: World, name: str, node: int = 0) -> dict[str, Any]:
    return {**add_body(world, name, node), "container_id": f"sandbox-{name}"}


def key(name: str) -> str:
    return f"?container_id=sandbox-{name}&ifname=net1"


@contextmanager
def vm_held(world: World, vm: int = 0) -> Iterator[None]:
    """Another attach (or detach) holds the VM's turn, from another connection, for the
    block."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        try:
            with object_lock(vm_lock_name(world.location.pk, world.vm(vm))) as taken:
                assert taken
                held.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(10)
    try:
        yield
    finally:
        release.set()
        thread.join()


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every time.sleep of this thread, recorded and refused: a request that waits fails."""
    me = threading.get_ident()
    slept: list[float] = []
    real = time.sleep

    def sleep(seconds: float) -> None:
        if threading.get_ident() == me:
            slept.append(seconds)
            raise AssertionError(f"slept {seconds} s in the request's thread")
        real(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    return slept


def attach_calls(world: World) -> int:
    return len([c for c in world.sim.calls()["calls"] if c["operation"] == ATTACH])


def list_calls(world: World) -> int:
    return len([c for c in world.sim.calls()["calls"] if c["operation"] == LIST])


def test_an_add_answers_202_at_once_while_another_attach_holds_the_vm(
    world: World, client: Client, no_sleep: list[float]
) -> None:
    world.pod("web")
    agent(client, world.agent_token)
    world.sim.clear_calls()
    with vm_held(world):
        queued = client.post(URL, body(world, "web"), content_type="application/json")
        polled = client.get(f"{URL}{world.uid('web')}/{key('web')}")
    assert queued.status_code == 202, queued.content
    assert queued["Retry-After"] == "1"
    assert queued.json()["state"] == "requested" and queued.json()["queue_position"] == 1
    assert queued.json()["mac"] == "" and queued.json()["address"] is None
    assert polled.status_code == 202 and polled.json()["queue_position"] == 1
    assert no_sleep == []  # the web request never waited for the VM's turn
    assert attach_calls(world) == 0 and world.sim_nics(world.vm(0)) == []

    vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))  # the worker
    attached = client.get(f"{URL}{world.uid('web')}/{key('web')}")
    assert attached.status_code == 200
    nic = attached.json()
    assert nic["state"] == "attached" and nic["queue_position"] is None
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [nic["mac"]]
    again = client.post(URL, body(world, "web"), content_type="application/json")
    assert again.status_code == 200 and again.json() == nic  # a lost answer, asked again


def test_the_202_says_when_to_ask_again_in_ms_from_the_vms_recent_attach_time(
    world: World, client: Client
) -> None:
    """Retry-After keeps to whole seconds, `retry_after_ms` to the VM's attaches: its
    recent attach time per request ahead and its own."""
    agent(client, world.agent_token)
    for name in ["first", "a", "b", "c"]:
        world.pod(name)
    client.post(URL, body(world, "first"), content_type="application/json")
    guessed = client.get(f"{URL}{world.uid('first')}/{key('first')}").json()["retry_after_ms"]
    assert guessed == 1000  # nothing measured on the VM yet
    vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    first = PodNic.objects.get(pod_name="first")
    assert first.attach_started_at is not None
    PodNic.objects.filter(pk=first.pk).update(
        attached_at=first.attach_started_at + timedelta(milliseconds=200)
    )
    answers = [
        client.post(URL, body(world, name), content_type="application/json")
        for name in ["a", "b", "c"]
    ]
    assert [a.status_code for a in answers] == [202] * 3
    assert [a.json()["retry_after_ms"] for a in answers] == [200, 400, 600]
    assert [a["Retry-After"] for a in answers] == ["1", "2", "3"]
    # The attach under way counts by what is left of it, a quarter of one once overdue.
    PodNic.objects.filter(pod_name="a").update(
        state=State.ATTACHING, attach_started_at=timezone.now() - timedelta(seconds=10)
    )
    polled = client.get(f"{URL}{world.uid('b')}/{key('b')}").json()
    assert (polled["queue_position"], polled["retry_after_ms"]) == (2, 250)
    attached = client.get(f"{URL}{world.uid('first')}/{key('first')}").json()
    assert attached["retry_after_ms"] is None
    # A VM with no attach of its own yet goes by its location's.
    world.pod("other", node=1)
    other = agent(Client(), world.node_token(1)).post(
        URL, body(world, "other", node=1), content_type="application/json"
    )
    assert other.json()["retry_after_ms"] == 200


def test_queue_positions_follow_the_order_of_the_adds_per_vm(world: World, client: Client) -> None:
    names = ["a", "b", "c"]
    for name in names:
        world.pod(name)
    world.pod("other", node=1)
    agent(client, world.agent_token)
    answers = [
        client.post(URL, body(world, name), content_type="application/json") for name in names
    ]
    assert [a.status_code for a in answers] == [202] * 3
    assert [a.json()["queue_position"] for a in answers] == [1, 2, 3]
    assert [a["Retry-After"] for a in answers] == ["1", "2", "3"]
    other = agent(Client(), world.node_token(1)).post(
        URL, body(world, "other", node=1), content_type="application/json"
    )
    assert other.status_code == 202 and other.json()["queue_position"] == 1  # its own VM's

    # An attach under way is first; the others move up.
    row = PodNic.objects.get(pod_name="b")
    PodNic.objects.filter(pk=row.pk).update(state=State.ATTACHING)
    positions = {
        name: client.get(f"{URL}{world.uid(name)}/{key(name)}").json()["queue_position"]
        for name in names
    }
    assert positions == {"b": 1, "a": 2, "c": 3}
    PodNic.objects.filter(pk=row.pk).update(state=State.REQUESTED)

    result = vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert [r.pod_name for r in result.attached] == names
    rows = list(PodNic.objects.filter(vm_id=world.vm(0)).order_by("attach_started_at"))
    assert [r.pod_name for r in rows] == names
    assert len({r.mac for r in rows}) == 3
    assert PodNic.objects.get(pod_name="other").state == State.REQUESTED  # another VM's queue


def test_a_queued_add_is_attached_by_the_worker(
    world: World, client: Client, run_tasks: RunTasks
) -> None:
    world.pod("web")
    agent(client, world.agent_token)
    with run_tasks():
        queued = client.post(URL, body(world, "web"), content_type="application/json")
        assert queued.status_code == 202
    nic = client.get(f"{URL}{world.uid('web')}/{key('web')}")
    assert nic.status_code == 200 and nic.json()["state"] == "attached"
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [nic.json()["mac"]]


def test_an_attach_lists_the_vms_nics_twice(world: World) -> None:
    for name in ("a", "b", "c"):
        world.pod(name)
    world.add("a")
    world.sim.clear_calls()
    world.add("b")
    assert (list_calls(world), attach_calls(world)) == (2, 1)
    world.sim.clear_calls()
    world.request("c")
    assert list_calls(world) == 0  # ADD itself lists nothing
    vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert (list_calls(world), attach_calls(world)) == (2, 1)
    assert len(world.sim_nics(world.vm(0))) == 3


def test_a_failure_is_recorded_on_the_request_and_the_poll_says_it(
    world: World, client: Client
) -> None:
    with whitesky_client(world.account) as account_client:
        account_client.start_vm(cloudspace_id=CLOUDSPACE, vm_id=world.vm(0))
    world.sim.configure(nic_attach_requires_halted_vm=True)
    world.pod("web")
    world.pod("next")
    agent(client, world.agent_token)
    assert client.post(URL, body(world, "web"), content_type="application/json").status_code == 202
    assert client.post(URL, body(world, "next"), content_type="application/json").status_code == 202
    result = vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert [r.pod_name for r in result.failed] == ["web", "next"]  # one refusal stops no other
    polled = client.get(f"{URL}{world.uid('web')}/{key('web')}")
    assert polled.status_code == 200
    answer = polled.json()
    assert answer["state"] == "failed" and answer["failure_code"] == "whitesky_refused"
    assert f"refused to attach a NIC to VM {world.vm(0)}" in answer["failure"]
    vms = {vm["vm_id"]: vm for vm in world.sim.state()["vms"]}
    assert vms[world.vm(0)]["status"] == "RUNNING"

    # An ADD again queues it again, behind what is queued.
    world.pod("third")
    client.post(URL, body(world, "third"), content_type="application/json")
    again = client.post(URL, body(world, "web"), content_type="application/json")
    assert again.status_code == 202
    assert again.json()["state"] == "requested" and again.json()["failure_code"] == ""
    assert again.json()["queue_position"] == 2


def test_del_of_a_queued_request_cancels_it_without_the_vms_turn(
    world: World, client: Client, no_sleep: list[float]
) -> None:
    world.pod("web")
    agent(client, world.agent_token)
    assert client.post(URL, body(world, "web"), content_type="application/json").status_code == 202
    world.sim.clear_calls()
    with vm_held(world):
        gone = client.delete(f"{URL}{world.uid('web')}/{key('web')}")
        repeated = client.delete(f"{URL}{world.uid('web')}/{key('web')}")
    assert (gone.status_code, repeated.status_code) == (204, 204)
    assert no_sleep == []
    row = PodNic.objects.get()
    assert row.state == State.RELEASED and "cancelled while queued" in row.release_reason
    assert world.nic_calls() == []
    result = vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert result.attached == [] and world.sim_nics(world.vm(0)) == []
    assert client.get(f"{URL}{world.uid('web')}/{key('web')}").status_code == 404


DETACH = "detachExternalNetworksVirtualMachine"


def test_a_del_while_an_add_holds_the_vm_answers_at_once_and_detaches_after_it(
    world: World, client: Client, no_sleep: list[float]
) -> None:
    world.pod("web")
    world.add("web", container_id="sandbox-web")
    world.pod("db")
    agent(client, world.agent_token)
    # db's ADD is queued first; then, while an attach holds the VM, web's DEL comes.
    assert client.post(URL, body(world, "db"), content_type="application/json").status_code == 202
    world.sim.clear_calls()
    with vm_held(world):
        started = time.monotonic()
        gone = client.delete(f"{URL}{world.uid('web')}/{key('web')}")
        repeated = client.delete(f"{URL}{world.uid('web')}/{key('web')}")
        took = time.monotonic() - started
    assert no_sleep == [] and took < 5
    assert (gone.status_code, repeated.status_code) == (202, 202)
    assert gone.json()["state"] == "attached" and gone.json()["queue_position"] == 2
    assert repeated.json()["queue_position"] == 2  # a repeated DEL keeps its place
    assert world.nic_calls() == []  # nothing asked of whitesky in the request
    web = PodNic.objects.get(container_id="sandbox-web")
    assert web.detach_queued_at is not None and web.state == State.ATTACHED
    # Its ADD again while the detach is queued is refused: the NIC is on its way out.
    again = client.post(URL, body(world, "web"), content_type="application/json")
    assert again.status_code == 409 and "being detached" in again.json()["detail"]
    # The VM's queue: db's attach first, then web's detach, one at a time.
    result = vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert [row.pod_name for row in result.attached] == ["db"]
    assert [row.pod_name for row in result.detached] == ["web"]
    changes = [c["operation"] for c in world.nic_calls() if c["operation"] in (ATTACH, DETACH)]
    assert changes == [ATTACH, DETACH]
    web.refresh_from_db()
    assert web.state == State.RELEASED and web.release_reason == "CNI DEL"
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [
        PodNic.objects.get(pod_name="db").mac
    ]
    assert client.get(f"{URL}{world.uid('web')}/{key('web')}").status_code == 404
    assert client.delete(f"{URL}{world.uid('web')}/{key('web')}").status_code == 204


def test_a_gc_while_the_vm_is_held_answers_at_once_with_the_detach_queued(
    world: World, client: Client, no_sleep: list[float], settings: Any
) -> None:
    settings.SRIOV_RECLAIM_GRACE_SECONDS = 0
    world.pod("web")
    world.add("web", cni_network="capvco-sriov")
    agent(client, world.agent_token)
    world.sim.clear_calls()
    with vm_held(world):
        answer = client.post(
            "/api/v1/sriov/agent/gc/",
            {"node_name": world.node(0), "cni_network": "capvco-sriov", "valid_attachments": []},
            content_type="application/json",
        )
    assert no_sleep == [] and world.nic_calls() == []
    assert answer.status_code == 200
    assert answer.json()["failed"] == [] and len(answer.json()["detaching"]) == 1
    result = vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert [row.pod_name for row in result.detached] == ["web"]
    row = PodNic.objects.get()
    assert row.state == State.RELEASED and row.release_reason.startswith("CNI GC")
    assert world.sim_nics(world.vm(0)) == []


def test_a_detach_that_fails_leaves_the_queue_and_the_poll_says_why(
    world: World, client: Client
) -> None:
    world.pod("web")
    world.pod("db")
    world.add("web")
    agent(client, world.agent_token)
    assert client.delete(f"{URL}{world.uid('web')}/{key('web')}").status_code == 202
    assert client.post(URL, body(world, "db"), content_type="application/json").status_code == 202
    world.sim.fault(operation=DETACH, status=409, times=1)
    result = vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    # The failed detach does not hold up the VM's queue: db's attach is made after it.
    assert [row.pod_name for row in result.failed] == ["web"]
    assert [row.pod_name for row in result.attached] == ["db"]
    polled = client.get(f"{URL}{world.uid('web')}/{key('web')}")
    assert polled.status_code == 200 and polled.json()["failure_code"] == "whitesky_refused"
    # The runtime's DEL again queues it again; this time it is made.
    assert client.delete(f"{URL}{world.uid('web')}/{key('web')}").status_code == 202
    vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert client.get(f"{URL}{world.uid('web')}/{key('web')}").status_code == 404
    assert len(world.sim_nics(world.vm(0))) == 1


class WorkerKilled(BaseException):
    """The worker process dies: nothing after this line of the task runs."""


def killed_after_the_attach(config: Any) -> ws.WhiteskyClient:
    client = sriov_whitesky_client(config)
    send = client.send_external_nic_attach

    def send_and_die(**kwargs: Any) -> None:
        send(**kwargs)
        raise WorkerKilled

    client.send_external_nic_attach = send_and_die  # type: ignore[method-assign]
    return client


def test_a_worker_killed_mid_attach_leaves_a_queue_the_next_tick_resumes_with_one_nic(
    world: World, run_tasks: RunTasks
) -> None:
    world.pod("web")
    world.pod("next")
    world.request("web")
    world.request("next")
    with pytest.raises(WorkerKilled):
        vm_queue_run(
            location_id=world.location.pk,
            vm_id=world.vm(0),
            clients=Clients(whitesky=killed_after_the_attach),
        )
    web = PodNic.objects.get(pod_name="web")
    assert web.state == State.ATTACHING and web.mac == ""
    assert len(world.sim_nics(world.vm(0))) == 1  # it landed; nobody recorded it

    world.sim.clear_calls()
    with run_tasks():
        sriov_vm_queues_resume()  # beat's tick
    web.refresh_from_db()
    made = world.sim_nics(world.vm(0))
    assert web.state == State.ATTACHED and web.mac in {n["mac_address"] for n in made}
    assert PodNic.objects.get(pod_name="next").state == State.ATTACHED
    assert len(made) == 2 and attach_calls(world) == 1  # `next`'s: never a second for `web`
    assert list_calls(world) == 3  # 1 to find web's NIC again, 2 for next's attach


def killed_before_the_attach(config: Any) -> ws.WhiteskyClient:
    client = sriov_whitesky_client(config)

    def die(**kwargs: Any) -> None:
        raise WorkerKilled

    client.send_external_nic_attach = die  # type: ignore[method-assign]
    return client


def test_an_attach_that_may_still_land_is_never_sent_again_before_its_outcome_window(
    world: World,
) -> None:
    """Killed once the row said `attaching`, before (as far as anyone can tell) the attach
    went out: until the attach's outcome window has passed it may still land, so the queue
    waits; after it, the listing without it means it did not happen, and it is sent."""
    world.pod("web")
    world.request("web")
    with pytest.raises(WorkerKilled):
        vm_queue_run(
            location_id=world.location.pk,
            vm_id=world.vm(0),
            clients=Clients(whitesky=killed_before_the_attach),
        )
    world.sim.clear_calls()
    waiting = vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert waiting.unresolved is not None and waiting.again
    assert (list_calls(world), attach_calls(world)) == (1, 0)
    row = PodNic.objects.get()
    assert row.state == State.ATTACHING and "outcome is settled" in row.failure
    assert row.attach_started_at is not None
    PodNic.objects.update(attach_started_at=row.attach_started_at - timedelta(hours=1))
    done = vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert [r.pod_name for r in done.attached] == ["web"]
    assert attach_calls(world) == 1 and len(world.sim_nics(world.vm(0))) == 1


def test_a_lost_answer_stays_first_in_the_queue_until_a_listing_finds_it(world: World) -> None:
    world.pod("web")
    world.pod("next")
    world.request("web")
    world.request("next")
    world.sim.fault(operation=ATTACH, lost_response="drop", times=1)
    world.sim.fault(operation=LIST, status=400, skip=1)
    result = vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert result.unresolved is not None and result.unresolved.pod_name == "web"
    assert result.again
    assert PodNic.objects.get(pod_name="next").state == State.REQUESTED  # waits behind it
    assert "outcome unknown" in PodNic.objects.get(pod_name="web").failure
    world.sim.clear_faults()
    result = vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    assert [r.pod_name for r in result.attached] == ["web", "next"]
    assert len(world.sim_nics(world.vm(0))) == 2 and attach_calls(world) == 2


def test_beat_resumes_the_queues_often() -> None:
    from django.conf import settings

    entry = settings.CELERY_BEAT_SCHEDULE["sriov-queues"]
    assert entry["task"] == "sriov.tasks.sriov_vm_queues_resume"
    assert entry["schedule"].total_seconds() <= 15  # well inside the plugin's 80 s


def test_only_the_first_add_in_a_vms_queue_sends_its_task_and_that_run_attaches_all(
    world: World, client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    positions, sends = [], []
    for name, node in (("a", 0), ("b", 0), ("c", 1)):
        world.pod(name, node=node)
        agent(client, world.node_token(node))
        # What the ADD sends once committed (its VM's queue task), not sent here.
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            answer = client.post(URL, body(world, name, node), content_type="application/json")
        positions.append(answer.json()["queue_position"])
        sends.append(len(callbacks))
    assert positions == [1, 2, 1]
    assert sends == [1, 0, 1]  # b waits behind a on VM 0: a's task is VM 0's
    vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))  # a's task
    states = dict(PodNic.objects.values_list("pod_name", "state"))
    assert states == {"a": State.ATTACHED, "b": State.ATTACHED, "c": State.REQUESTED}
