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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sriov.models import PodNic
from tests.conftest import require
from tests.kube_sim import KubeSimulator
from tests.sriov.support import World, world_build
from tests.whitesky_sim import PROJECT_ROOT, WhiteskySimulator


def ip(*args: str, netns: str | None = None) -> Any:
    command = ["ip", "-j", *args] if netns is None else ["ip", "-n", netns, "-j", *args]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out) if out.strip() else []


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


@pytest.fixture
def live_world(whitesky_sim: WhiteskySimulator, kube_sim: KubeSimulator, live_server: Any) -> World:
    return world_build(whitesky_sim, kube_sim)


def config(agent_url: str, token_file: Path, **more: Any) -> str:
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "capvco-sriov",
            "type": "capvco-sriov",
            "agentUrl": agent_url,
            "tokenFile": str(token_file),
            "nodeName": "node-0",
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


def pod_env(world: World, netns: str, name: str = "web") -> dict[str, str]:
    return {
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


def test_add_check_del_in_real_namespaces(
    live_world: World, live_server: Any, netns: str, vf_names: list[str], tmp_path: Path
) -> None:
    world = live_world
    token_file = tmp_path / "token"
    token_file.write_text(world.agent_token + "\n")
    stdin = config(f"{live_server.url}/api/v1/sriov/agent/", token_file)
    world.pod("web")
    default_routes_before = ip("route", "show", "default", netns=netns)
    env = pod_env(world, netns)

    running = plugin("ADD", stdin, env=env, wait=False)
    assert isinstance(running, subprocess.Popen)
    nic = wait_for_mac(world.uid("web"))
    # The hot-plugged NIC shows up on the node: a veth with its MAC.
    vf = f"cvvf{uuid.uuid4().hex[:6]}"
    vf_names.append(vf)
    subprocess.run(
        ["ip", "link", "add", vf, "address", nic.mac, "type", "veth", "peer", "name", f"{vf}p"],
        check=True,
    )
    out, err = running.communicate(timeout=60)
    assert running.returncode == 0, (out, err)
    result = json.loads(out)
    assert result["cniVersion"] == "1.0.0"
    assert result["interfaces"] == [
        {"name": "net1", "mac": nic.mac, "sandbox": f"/var/run/netns/{netns}"}
    ]
    assert result["ips"] == [{"address": f"{nic.ip}/24", "gateway": "10.50.0.1", "interface": 0}]

    (link,) = ip("addr", "show", "net1", netns=netns)
    assert link["address"] == nic.mac
    assert link["mtu"] == 1500
    assert [(a["local"], a["prefixlen"]) for a in link["addr_info"] if a["family"] == "inet"] == [
        (nic.ip, 24)
    ]
    assert ip("route", "show", "default", netns=netns) == default_routes_before == []
    assert not any(entry["ifname"] == vf for entry in ip("link", "show"))

    again = plugin("ADD", stdin, env=env)  # a repeated ADD: the same, nothing moves
    assert again.returncode == 0, again.stdout
    assert json.loads(again.stdout)["interfaces"][0]["mac"] == nic.mac

    check = plugin("CHECK", stdin, env=env)
    assert (check.returncode, check.stdout) == (0, ""), check.stdout

    done = plugin("DEL", stdin, env=env)
    assert (done.returncode, done.stdout) == (0, ""), done.stdout
    assert not any(entry["ifname"] == "net1" for entry in ip("link", "show", netns=netns))
    host = {entry["ifname"]: entry for entry in ip("link", "show")}
    assert vf in host and host[vf]["address"] == nic.mac  # back on the host, its own name
    nic.refresh_from_db()
    assert nic.state == PodNic.State.RELEASED
    assert world.sim_nics(world.vm(0)) == []

    twice = plugin("DEL", stdin, env=env)
    assert (twice.returncode, twice.stdout) == (0, "")


def test_del_when_the_namespace_is_gone(
    live_world: World, live_server: Any, vf_names: list[str], tmp_path: Path
) -> None:
    require(os.geteuid() == 0 and shutil.which("ip") is not None, "needs root and iproute2")
    world = live_world
    token_file = tmp_path / "token"
    token_file.write_text(world.agent_token)
    stdin = config(f"{live_server.url}/api/v1/sriov/agent/", token_file)
    world.pod("web")
    name = f"capvco-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        env = pod_env(world, name)
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
    token_file = tmp_path / "token"
    token_file.write_text(world.agent_token)
    stdin = config(f"{live_server.url}/api/v1/sriov/agent/", token_file, interfaceWaitSeconds=1)
    world.pod("web")
    result = plugin("ADD", stdin, env=pod_env(world, netns))
    assert result.returncode == 1
    error = json.loads(result.stdout)
    assert error["code"] == 101
    assert "no interface with that MAC appeared within 1 s" in error["msg"]
    assert "Traceback" not in result.stderr


def test_a_refusal_of_the_agent_api_is_a_cni_error(
    live_world: World, live_server: Any, netns: str, tmp_path: Path
) -> None:
    world = live_world
    token_file = tmp_path / "token"
    token_file.write_text(world.agent_token)
    stdin = config(f"{live_server.url}/api/v1/sriov/agent/", token_file, nodeName="node-1")
    world.pod("web")  # on node-0
    result = plugin("ADD", stdin, env=pod_env(world, netns))
    assert result.returncode == 1
    error = json.loads(result.stdout)
    assert error["code"] == 100
    assert "HTTP 403" in error["msg"] and "not on node-1" in error["msg"]


BASE_ENV = {
    "CNI_CONTAINERID": "abc",
    "CNI_NETNS": "/var/run/netns/nowhere",
    "CNI_IFNAME": "net1",
    "CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=1234",
}
GOOD_CONFIG = json.dumps(
    {"cniVersion": "1.0.0", "type": "capvco-sriov", "agentUrl": "http://127.0.0.1:9/",
     "tokenFile": "/nonexistent"}
)  # fmt: skip


@pytest.mark.parametrize(
    ("command", "stdin", "env", "code", "message"),
    [
        ("ADD", "{not json", BASE_ENV, 6, "not JSON"),
        ("ADD", "[1, 2]", BASE_ENV, 6, "not a JSON object"),
        ("ADD", GOOD_CONFIG, {k: v for k, v in BASE_ENV.items() if k != "CNI_IFNAME"}, 4,
         "CNI_IFNAME is not set"),
        ("ADD", GOOD_CONFIG, {**BASE_ENV, "CNI_ARGS": "K8S_POD_NAME=web"}, 4, "K8S_POD_UID"),
        ("FROB", GOOD_CONFIG, BASE_ENV, 4, "unknown CNI_COMMAND"),
        ("", GOOD_CONFIG, BASE_ENV, 4, "CNI_COMMAND is not set"),
        ("ADD", json.dumps({"cniVersion": "9.9.9"}), BASE_ENV, 1, "not supported"),
        ("ADD", json.dumps({"cniVersion": "1.0.0"}), BASE_ENV, 7, "no agentUrl"),
        ("DEL", GOOD_CONFIG, BASE_ENV, 5, "cannot read the agent token"),
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
        "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0"],
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
