"""The CNI plugin for real: run as the container runtime runs it (environment, config on
stdin), against the agent API of a live server, in network namespaces. A veth interface
with the NIC's MAC stands in for the VF that whitesky hot-plugs into the VM."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sriov.models import PodNic
from tests.conftest import require
from tests.http_stub import HttpStub, Reply
from tests.sriov.support import World
from tests.whitesky_sim import PROJECT_ROOT

# These tests make interfaces in the host's network namespace, each standing for a VF
# found by the MAC the simulator handed out: one worker runs them (bin/test: --dist
# loadgroup), and each simulator process hands out MACs of its own (simulator MAC_SPACE).
pytestmark = pytest.mark.xdist_group("host-network")


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace standing in for a pod's; removed afterwards."""
    require(os.geteuid() == 0 and shutil.which("ip") is not None, "needs root and iproute2")
    name = f"capvco-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def vf_names() -> Iterator[list[str]]:
    """Host interfaces a test made; removed afterwards (wherever they went)."""
    made: list[str] = []
    yield made
    for name in made:
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)


def node_dir(tmp_path: Path, world: World, agent_url: str, node: str = "node-0") -> Path:
    """The plugin's own directory, as the installer writes it."""
    folder = tmp_path / "capvco-sriov.d"
    folder.mkdir(exist_ok=True)
    (folder / "token").write_text(world.agent_token + "\n")
    (folder / "node-name").write_text(node + "\n")
    (folder / "agent-url").write_text(agent_url + "\n")
    return folder


def config(**more: Any) -> str:
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "capvco-sriov",
            "type": "capvco-sriov",
            "interfaceWaitSeconds": 20,
            **more,
        }
    )


def plugin(
    command: str, stdin: str, *, env: dict[str, str] | None = None, wait: bool = True
) -> subprocess.Popen[str] | subprocess.CompletedProcess[str]:
    environ = {"PATH": os.environ["PATH"], "CNI_COMMAND": command, **(env or {})}
    args = [sys.executable, "-m", "sriov.cni"]
    if not wait:
        process = subprocess.Popen(
            args, cwd=PROJECT_ROOT, env=environ, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdin is not None
        process.stdin.write(stdin)
        process.stdin.close()
        process.stdin = None  # written whole: communicate() only reads
        return process
    return subprocess.run(
        args, cwd=PROJECT_ROOT, env=environ, input=stdin, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def pod_env(world: World, netns: str, folder: Path, name: str = "web") -> dict[str, str]:
    return {
        "CAPVCO_SRIOV_CONF_DIR": str(folder),
        "CNI_CONTAINERID": "0123456789ab",
        "CNI_NETNS": f"/var/run/netns/{netns}",
        "CNI_IFNAME": "net1",
        "CNI_PATH": "/opt/cni/bin",
        "CNI_ARGS": (
            f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};"
            f"K8S_POD_UID={world.uid(name)};K8S_POD_INFRA_CONTAINER_ID=0123456789ab"
        ),
    }


def wait_for_mac(pod_uid: str, timeout: float = 20) -> PodNic:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = PodNic.objects.filter(pod_uid=pod_uid, state=PodNic.State.ATTACHED).first()
        if row is not None:
            return row
        time.sleep(0.05)
    raise AssertionError("the agent API attached no NIC")


def test_del_when_the_namespace_is_gone(
    live_world: World, live_server: Any, vf_names: list[str], tmp_path: Path
) -> None:
    require(os.geteuid() == 0 and shutil.which("ip") is not None, "needs root and iproute2")
    world = live_world
    folder = node_dir(tmp_path, world, f"{live_server.url}/api/v1/sriov/agent/")
    stdin = config()
    world.pod("web")
    name = f"capvco-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        env = pod_env(world, name, folder)
        running = plugin("ADD", stdin, env=env, wait=False)
        assert isinstance(running, subprocess.Popen)
        nic = wait_for_mac(world.uid("web"))
        vf = f"cvvf{uuid.uuid4().hex[:6]}"
        vf_names.append(vf)
        subprocess.run(
            ["ip", "link", "add", vf, "address", nic.mac, "type", "veth", "peer", "name",
             f"{vf}p"],
            check=True,
        )  # fmt: skip
        out, _ = running.communicate(timeout=60)
        assert running.returncode == 0, out
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    gone = plugin("DEL", stdin, env=env)
    assert (gone.returncode, gone.stdout) == (0, ""), gone.stdout
    nic.refresh_from_db()
    assert nic.state == PodNic.State.RELEASED
    assert world.sim_nics(world.vm(0)) == []


def test_add_says_when_the_nic_never_shows_up(
    live_world: World, live_server: Any, netns: str, tmp_path: Path
) -> None:
    world = live_world
    folder = node_dir(tmp_path, world, f"{live_server.url}/api/v1/sriov/agent/")
    stdin = config(interfaceWaitSeconds=1)
    world.pod("web")
    result = plugin("ADD", stdin, env=pod_env(world, netns, folder))
    assert result.returncode == 1
    error = json.loads(result.stdout)
    assert error["code"] == 101
    assert "no interface with that MAC appeared within 1 s" in error["msg"]
    assert "Traceback" not in result.stderr


def test_a_refusal_of_the_agent_api_is_a_cni_error(
    live_world: World, live_server: Any, netns: str, tmp_path: Path
) -> None:
    world = live_world
    folder = node_dir(tmp_path, world, f"{live_server.url}/api/v1/sriov/agent/", node="node-1")
    world.pod("web")  # on node-0
    result = plugin("ADD", config(), env=pod_env(world, netns, folder))
    assert result.returncode == 1
    error = json.loads(result.stdout)
    assert error["code"] == 100
    assert "HTTP 403" in error["msg"] and "not on node-1" in error["msg"]


def test_a_refused_attach_is_the_adds_cni_error(
    live_world: World, live_server: Any, netns: str, tmp_path: Path
) -> None:
    """The worker records whitesky's refusal on the request; the plugin's poll reads it."""
    from cloud.whitesky import whitesky_client
    from tests.sriov.support import CLOUDSPACE

    world = live_world
    with whitesky_client(world.account) as client:
        client.start_vm(cloudspace_id=CLOUDSPACE, vm_id=world.vm(0))
    world.sim.configure(nic_attach_requires_halted_vm=True)
    folder = node_dir(tmp_path, world, f"{live_server.url}/api/v1/sriov/agent/")
    world.pod("web")
    result = plugin("ADD", config(), env=pod_env(world, netns, folder))
    assert result.returncode == 1
    error = json.loads(result.stdout)
    assert error["code"] == 100
    assert f"refused to attach a NIC to VM {world.vm(0)}" in error["msg"]
    assert PodNic.objects.get().failure_code == "whitesky_refused"


def test_an_add_still_queued_at_its_timeout_says_so(
    live_world: World, live_server: Any, netns: str, tmp_path: Path
) -> None:
    """The VM's turn stays taken (a detach that does not end): the plugin polls until its
    requestTimeoutSeconds and says the NIC is still queued, a CNI 'try again later'."""
    import threading

    from django.db import connections

    from capvco_web.locks import object_lock
    from sriov.agent import vm_lock_name

    world = live_world
    folder = node_dir(tmp_path, world, f"{live_server.url}/api/v1/sriov/agent/")
    world.pod("web")
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        try:
            with object_lock(vm_lock_name(world.location.pk, world.vm(0))):
                held.set()
                release.wait(60)
        finally:
            connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(10)
    try:
        result = plugin("ADD", config(requestTimeoutSeconds=4), env=pod_env(world, netns, folder))
    finally:
        release.set()
        thread.join()
    assert result.returncode == 1
    error = json.loads(result.stdout)
    assert error["code"] == 11
    assert "still queued on this node's VM (place 1) after 4 s" in error["msg"]
    assert PodNic.objects.get().state == PodNic.State.REQUESTED
    assert world.sim_nics(world.vm(0)) == []


BASE_ENV = {
    "CNI_CONTAINERID": "abc",
    "CNI_NETNS": "/var/run/netns/nowhere",
    "CNI_IFNAME": "net1",
    "CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=1234",
    "CAPVCO_SRIOV_CONF_DIR": "/nonexistent",
}
GOOD_CONFIG = json.dumps({"cniVersion": "1.0.0", "type": "capvco-sriov"})
V11_CONFIG = json.dumps({"cniVersion": "1.1.0", "type": "capvco-sriov"})


@pytest.mark.parametrize(
    ("command", "stdin", "env", "code", "message"),
    [
        ("ADD", "{not json", BASE_ENV, 6, "not JSON"),
        ("ADD", "[1, 2]", BASE_ENV, 6, "not a JSON object"),
        ("ADD", GOOD_CONFIG, {k: v for k, v in BASE_ENV.items() if k != "CNI_IFNAME"}, 4,
         "CNI_IFNAME is not set"),
        ("DEL", GOOD_CONFIG, {k: v for k, v in BASE_ENV.items() if k != "CNI_CONTAINERID"}, 4,
         "CNI_CONTAINERID is not set"),
        ("ADD", GOOD_CONFIG, {**BASE_ENV, "CNI_ARGS": "K8S_POD_NAME=web"}, 4, "K8S_POD_UID"),
        ("FROB", GOOD_CONFIG, BASE_ENV, 4, "unknown CNI_COMMAND"),
        ("", GOOD_CONFIG, BASE_ENV, 4, "CNI_COMMAND is not set"),
        ("ADD", json.dumps({"cniVersion": "9.9.9"}), BASE_ENV, 1, "not supported"),
        ("ADD", json.dumps({"cniVersion": "1.0.0", "agentUrl": "http://127.0.0.1:9/"}),
         BASE_ENV, 2, "sets agentUrl"),
        ("DEL", json.dumps({"cniVersion": "1.0.0", "tokenFile": "/etc/machine-id"}), BASE_ENV,
         2, "sets tokenFile"),
        ("ADD", json.dumps({"cniVersion": "1.0.0", "prevResult": {"ips": "x"}}), BASE_ENV, 6,
         "prevResult"),
        ("CHECK", GOOD_CONFIG, BASE_ENV, 7, "CHECK needs prevResult"),
        ("DEL", GOOD_CONFIG, BASE_ENV, 5, "cannot read the agent URL"),
        ("GC", GOOD_CONFIG, BASE_ENV, 1, "GC is CNI 1.1.0"),
        ("STATUS", json.dumps({"cniVersion": "0.4.0"}), BASE_ENV, 1, "STATUS is CNI 1.1.0"),
        ("GC", V11_CONFIG, BASE_ENV, 7, "cni.dev/valid-attachments"),
        ("GC", json.dumps({"cniVersion": "1.1.0", "cni.dev/valid-attachments": [{"x": 1}]}),
         BASE_ENV, 6, "without containerID and ifname"),
        ("STATUS", V11_CONFIG, BASE_ENV, 50, "cannot serve an ADD"),
    ],
)  # fmt: skip
def test_bad_input_gets_a_cni_error_never_a_traceback(
    command: str, stdin: str, env: dict[str, str], code: int, message: str
) -> None:
    result = plugin(command, stdin, env=env)
    assert result.returncode == 1
    error = json.loads(result.stdout)
    assert error["code"] == code and message in error["msg"], error
    assert set(error) <= {"cniVersion", "code", "msg", "details"}
    assert "Traceback" not in result.stderr


def test_version() -> None:
    result = plugin("VERSION", "")
    assert result.returncode == 0
    assert json.loads(result.stdout) == {
        "cniVersion": "1.0.0",
        "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
    }


def test_the_plugin_imports_no_django_and_starts_fast() -> None:
    probe = (
        "import sys, time; t = time.perf_counter(); import sriov.cni.plugin; "
        "print(time.perf_counter() - t, 'django' in sys.modules, 'pyroute2' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[1:] == ["False", "False"]  # pyroute2 only when netlink is needed
    assert float(out[0]) < 0.5


@pytest.mark.parametrize(("hint", "asked"), [({"retry_after_ms": 120}, 0.12), ({}, 1.0)])
def test_the_plugin_polls_after_the_answers_retry_after_ms_rather_than_its_header(
    http_stub: Callable[[Reply], HttpStub],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    hint: dict[str, int],
    asked: float,
) -> None:
    """An agent API that keeps the request queued, Retry-After 1 s: the plugin waits what
    `retry_after_ms` asks for between its polls; an answer without one, the header's."""
    from sriov.cni import plugin as cni

    queued = {"state": "requested", "queue_position": 1, **hint}
    stub = http_stub(Reply(202, json.dumps(queued).encode(), {"Retry-After": "1"}))
    folder = tmp_path / "capvco-sriov.d"
    folder.mkdir()
    for name, value in (("agent-url", stub.origin), ("token", "t"), ("node-name", "node-0")):
        (folder / name).write_text(value + "\n")
    agent = cni.Agent(
        {"requestTimeoutSeconds": 3}, cni.NodeConfig({"CAPVCO_SRIOV_CONF_DIR": str(folder)})
    )
    waits: list[float] = []
    real = time.monotonic
    # What it asks to wait is recorded and passes on the clock at once, not slept.
    monkeypatch.setattr(time, "sleep", waits.append)
    monkeypatch.setattr(time, "monotonic", lambda: real() + sum(waits))
    body = {"pod_uid": "u", "container_id": "c", "ifname": "net1"}
    with pytest.raises(cni.CniError, match="still queued on this node's VM"):
        cni.nic_wait(agent, body)
    assert waits and set(waits) == {asked}
    assert [r.method for r in stub.received] == ["POST"] + ["GET"] * len(waits)


def _stub_agent(stub: HttpStub, tmp_path: Path) -> Any:
    from sriov.cni import plugin as cni

    folder = tmp_path / "capvco-sriov.d"
    folder.mkdir()
    for name, value in (("agent-url", stub.origin), ("token", "t"), ("node-name", "node-0")):
        (folder / name).write_text(value + "\n")
    return cni.Agent(
        {"requestTimeoutSeconds": 3}, cni.NodeConfig({"CAPVCO_SRIOV_CONF_DIR": str(folder)})
    )


@pytest.mark.parametrize(
    ("then", "code"),
    [
        (Reply(404, b'{"detail": "no NIC"}'), None),
        (Reply(200, json.dumps({"state": "detaching", "failure_code": "whitesky_refused",
                                "failure": "whitesky refused to detach"}).encode()), 100),
        (Reply(200, json.dumps({"state": "attached", "failure_code": "whitesky_unavailable",
                                "failure": "detach failed"}).encode()), 11),
        (None, 11),
    ],
)  # fmt: skip
def test_del_polls_its_queued_detach_until_the_nic_is_released(
    http_stub: Callable[[Reply], HttpStub],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    then: Reply | None,
    code: int | None,
) -> None:
    """The agent API queues the detach (202): the plugin polls (GET) until the attachment
    holds no NIC (404, a success), a failed detach (200: its error, `try again later` when
    worth it), or its timeout (still queued: `try again later`)."""
    from sriov.cni import plugin as cni

    queued = {"state": "attached", "queue_position": 2, "retry_after_ms": 200}
    stub = http_stub(Reply(202, json.dumps(queued).encode(), {"Retry-After": "1"}))
    agent = _stub_agent(stub, tmp_path)
    waits: list[float] = []
    real = time.monotonic

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if then is not None:
            stub.reply = then

    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(time, "monotonic", lambda: real() + sum(waits))
    key = {"container_id": "c", "ifname": "net1"}
    if code is None:
        cni.nic_release_wait(agent, "u", key)
    else:
        with pytest.raises(cni.CniError) as error:
            cni.nic_release_wait(agent, "u", key)
        assert error.value.code == code
        if then is None:
            assert "detach is still queued on this node's VM (place 2)" in error.value.msg
    assert set(waits) == {0.2}
    assert [r.method for r in stub.received] == ["DELETE"] + ["GET"] * len(waits)
