"""The CNI contract, held by a real runtime library: the plugin zip a node gets
(sriov/cni/install.py) run through libcni by a small driver of ours
(tests/sriov/cnidriver/main.go, built from Debian's golang-github-appc-cni-dev), chained
with Debian's reference plugins (/usr/lib/cni), in network namespaces made here, against
the agent API of a live server and the whitesky simulator. A veth interface with the MAC
the simulator handed out stands in for the VF that whitesky hot-plugs into the VM."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from capvco_web.models import AuditEvent
from sriov.cni.install import install, plugin_zip
from sriov.models import AgentToken, PodNic
from tests.conftest import require
from tests.kube_sim import KubeSimulator
from tests.sriov.support import World, queue_worker, world_build
from tests.whitesky_sim import PROJECT_ROOT, WhiteskySimulator

# These tests make interfaces in the host's network namespace, each standing for a VF
# found by the MAC the simulator handed out: one worker runs them (bin/test: --dist
# loadgroup), and each simulator process hands out MACs of its own (simulator MAC_SPACE).
pytestmark = pytest.mark.xdist_group("host-network")

REFERENCE_PLUGINS = Path("/usr/lib/cni")
LIBCNI_SOURCE = Path("/usr/share/gocode/src/github.com/containernetworking/cni/libcni")
# The versions libcni 1.1.2 can run ADD/CHECK/DEL for; 1.1.0 (GC, STATUS) apart.
LIBCNI_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"]
CONF_DIR_ENV = "CAPVCO_SRIOV_CONF_DIR"


@pytest.fixture(scope="session")
def cni_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver, built here in GOPATH mode from Debian's libcni source, beside the plugin
    zip exactly as the installer writes it onto a node."""
    require(os.geteuid() == 0 and shutil.which("ip") is not None, "needs root and iproute2")
    require(shutil.which("go") is not None, "needs golang-go (bin/test installs it)")
    require(LIBCNI_SOURCE.is_dir(), "needs golang-github-appc-cni-dev (bin/test installs it)")
    require((REFERENCE_PLUGINS / "tuning").exists(), "needs containernetworking-plugins")
    folder = tmp_path_factory.mktemp("cni-bin")
    gopath = tmp_path_factory.mktemp("gopath")
    subprocess.run(
        ["go", "build", "-o", str(folder / "cnidriver"), "./tests/sriov/cnidriver"],
        cwd=PROJECT_ROOT,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(gopath),
            "GOPATH": f"{gopath}:/usr/share/gocode",
            "GO111MODULE": "off",
            "GOCACHE": str(gopath / "cache"),
            "GOFLAGS": "",
        },
        check=True,
        capture_output=True,
        timeout=300,
    )
    (folder / "capvco-sriov").write_bytes(plugin_zip())
    (folder / "capvco-sriov").chmod(0o755)
    return folder


def ip(*args: str, netns: str | None = None) -> Any:
    command = ["ip", "-j", *args] if netns is None else ["ip", "-n", netns, "-j", *args]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out) if out.strip() else []


@pytest.fixture
def namespaces() -> Iterator[Callable[[], str]]:
    """Makes network namespaces standing in for sandboxes; all removed afterwards."""
    made: list[str] = []

    def make() -> str:
        name = f"capvco-cni-{uuid.uuid4().hex[:8]}"
        subprocess.run(["ip", "netns", "add", name], check=True)
        made.append(name)
        return name

    yield make
    for name in made:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


@pytest.fixture
def vfs() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)


@dataclass
class Runtime:
    """A container runtime on node `node_name`: libcni through the driver, the plugin's
    own directory (token, node name, agent URL) as the installer writes it."""

    world: World
    bin_dir: Path
    conf_dir: Path
    cache_dir: Path
    work: Path
    vfs: list[str]
    agent_url: str

    def conflist(self, version: str, *, chain: str = "tuning", **ours: Any) -> Path:
        plugins: list[dict[str, Any]] = [
            {"type": "capvco-sriov", "interfaceWaitSeconds": 20, **ours}
        ]
        if chain == "tuning":
            plugins.append(
                {"type": "tuning", "promisc": True, "dataDir": str(self.work / "tuning")}
            )
        elif chain == "loopback":
            plugins.insert(0, {"type": "loopback"})
        elif chain == "static":
            plugins.insert(0, {"type": "static", "ipam": STATIC_IPAM})
        elif chain == "mac":
            plugins.append(
                {"type": "tuning", "mac": TUNED_MAC, "dataDir": str(self.work / "tuning")}
            )
        path = self.work / f"{uuid.uuid4().hex[:8]}.conflist"
        path.write_text(
            json.dumps({"cniVersion": version, "name": "capvco-sriov", "plugins": plugins})
        )
        return path

    def env(self) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], CONF_DIR_ENV: str(self.conf_dir)}

    def driver(
        self,
        command: str,
        conflist: Path,
        *,
        pod: str = "web",
        netns: str = "",
        cid: str = "",
        ifname: str = "net1",
        wait: bool = True,
        more: tuple[str, ...] = (),
    ) -> Any:
        args = [
            str(self.bin_dir / "cnidriver"), command, "-conflist", str(conflist),
            "-path", f"{self.bin_dir}:{REFERENCE_PLUGINS}", "-cache", str(self.cache_dir),
            "-ifname", ifname, *more,
        ]  # fmt: skip
        if netns:
            args += ["-netns", f"/var/run/netns/{netns}"]
        if cid:
            args += ["-id", cid]
        if pod:
            uid = self.world.uid(pod)
            args += [
                "-args",
                f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod};"
                f"K8S_POD_UID={uid};K8S_POD_INFRA_CONTAINER_ID={cid}",
            ]
        if not wait:
            return subprocess.Popen(
                args, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        done = subprocess.run(args, env=self.env(), capture_output=True, text=True, timeout=120)
        return Answer(done.returncode, done.stdout, done.stderr)

    def plugin(
        self, command: str, config: dict[str, Any], *, pod: str, netns: str, cid: str
    ) -> Any:
        """The plugin run directly, as a runtime that speaks CNI 1.1 runs it."""
        env = {
            **self.env(),
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": cid,
            "CNI_NETNS": f"/var/run/netns/{netns}",
            "CNI_IFNAME": "net1",
            "CNI_PATH": f"{self.bin_dir}:{REFERENCE_PLUGINS}",
            "CNI_ARGS": f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod};"
            f"K8S_POD_UID={self.world.uid(pod)}",
        }
        running = subprocess.Popen(
            [str(self.bin_dir / "capvco-sriov")], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert running.stdin is not None
        running.stdin.write(json.dumps(config))
        running.stdin.close()
        running.stdin = None
        return running

    def add(
        self, conflist: Path, *, pod: str, netns: str, cid: str, running: Any = None
    ) -> tuple[Any, PodNic]:
        """ADD through libcni (or `running`), with the VF showing up on the node once
        whitesky attached it."""
        if running is None:
            running = self.driver("add", conflist, pod=pod, netns=netns, cid=cid, wait=False)
        row = wait_attached(cid, running)
        vf = f"cvvf{uuid.uuid4().hex[:6]}"
        self.vfs.append(vf)
        subprocess.run(
            ["ip", "link", "add", vf, "address", row.mac, "type", "veth", "peer", "name",
             f"{vf}p"],
            check=True,
        )  # fmt: skip
        out, err = running.communicate(timeout=120)
        assert running.returncode == 0, (out, err)
        return json.loads(out), row


@dataclass
class Answer:
    status: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def error(self) -> dict[str, Any]:
        assert self.status == 1, (self.stdout, self.stderr)
        return dict(self.json["error"])


STATIC_IPAM = {
    "type": "static",
    "addresses": [{"address": "192.0.2.10/24"}],
    "routes": [{"dst": "198.51.100.0/24", "gw": "192.0.2.1"}],
    "dns": {"nameservers": ["192.0.2.53"], "search": ["example.test"]},
}
TUNED_MAC = "02:00:5e:10:00:01"


def wait_attached(cid: str, running: subprocess.Popen[str], timeout: float = 30) -> PodNic:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = PodNic.objects.filter(container_id=cid, state=PodNic.State.ATTACHED).first()
        if row is not None:
            return row
        if running.poll() is not None:
            raise AssertionError(f"ADD ended before an attach: {running.communicate()}")
        time.sleep(0.05)
    raise AssertionError("the agent API attached no NIC")


@pytest.fixture
def runtime(
    whitesky_sim: WhiteskySimulator,
    kube_sim: KubeSimulator,
    live_server: Any,
    cni_bin: Path,
    tmp_path: Path,
    vfs: list[str],
) -> Iterator[Runtime]:
    world = world_build(whitesky_sim, kube_sim)
    conf_dir = tmp_path / "capvco-sriov.d"
    agent_url = f"{live_server.url}/api/v1/sriov/agent/"
    secret = tmp_path / "secret-token"
    secret.write_text(world.enrollment_token + "\n")
    # Node-0's installer: enrolls with the cluster's enrollment token and leaves the node's
    # own token, its name and the agent URL in the plugin's directory.
    install(
        bin_dir=tmp_path / "node-bin",
        conf_dir=conf_dir,
        token_file=secret,
        node_name="node-0",
        agent_url=agent_url,
    )
    (tmp_path / "cache").mkdir()
    # The worker that attaches the NICs the plugin's ADDs queue.
    with queue_worker():
        yield Runtime(
            world=world,
            bin_dir=cni_bin,
            conf_dir=conf_dir,
            cache_dir=tmp_path / "cache",
            work=tmp_path,
            vfs=vfs,
            agent_url=agent_url,
        )


def link(netns: str, name: str = "net1") -> dict[str, Any]:
    (found,) = ip("addr", "show", name, netns=netns)
    return dict(found)


def inet(entry: dict[str, Any]) -> list[tuple[str, int]]:
    return [(a["local"], a["prefixlen"]) for a in entry["addr_info"] if a["family"] == "inet"]


# --- every version, in a chain with tuning ------------------------------------------------


def test_version_lists_what_is_tested(runtime: Runtime) -> None:
    answer = runtime.driver("version", Path("/dev/null"), pod="", more=("-type", "capvco-sriov"))
    assert answer.status == 0, answer
    assert answer.json["supportedVersions"] == [*LIBCNI_VERSIONS, "1.1.0"]


@pytest.mark.parametrize("version", LIBCNI_VERSIONS)
def test_add_check_del_in_a_chain_through_libcni(
    runtime: Runtime, namespaces: Callable[[], str], version: str
) -> None:
    world = runtime.world
    world.pod("web")
    netns = namespaces()
    conflist = runtime.conflist(version)
    result, row = runtime.add(conflist, pod="web", netns=netns, cid="c1")

    assert result["cniVersion"] == version
    assert result["interfaces"] == [
        {"name": "net1", "mac": row.mac, "sandbox": f"/var/run/netns/{netns}"}
    ]
    ours: dict[str, Any] = {"address": f"{row.ip}/24", "gateway": "10.50.0.1", "interface": 0}
    if version != "1.0.0":
        ours["version"] = "4"  # required before 1.0.0
    assert result["ips"] == [ours]
    found = link(netns)
    assert found["address"] == row.mac and inet(found) == [(str(row.ip), 24)]
    assert "UP" in found["flags"] and "PROMISC" in found["flags"]  # tuning ran on it
    assert ip("route", "show", "default", netns=netns) == []

    if version != "0.3.0" and version != "0.3.1":  # CHECK is 0.4.0 on
        check = runtime.driver("check", conflist, pod="web", netns=netns, cid="c1")
        assert check.status == 0, check

    done = runtime.driver("del", conflist, pod="web", netns=netns, cid="c1")
    assert done.status == 0, done
    assert not any(e["ifname"] == "net1" for e in ip("link", "show", netns=netns))
    row.refresh_from_db()
    assert row.state == PodNic.State.RELEASED
    assert world.sim_nics(world.vm(0)) == []
    again = runtime.driver("del", conflist, pod="web", netns=netns, cid="c1")
    assert again.status == 0, again


# --- the findings -------------------------------------------------------------------------


def test_a_late_del_of_an_old_sandbox_leaves_the_new_sandbox_attached(
    runtime: Runtime, namespaces: Callable[[], str]
) -> None:
    world = runtime.world
    world.pod("web")
    conflist = runtime.conflist("1.0.0")
    old_ns, new_ns = namespaces(), namespaces()
    runtime.add(conflist, pod="web", netns=old_ns, cid="c1")
    first = runtime.driver("del", conflist, pod="web", netns=old_ns, cid="c1")
    assert first.status == 0, first
    _, new = runtime.add(conflist, pod="web", netns=new_ns, cid="c2")

    late = runtime.driver("del", conflist, pod="web", netns=old_ns, cid="c1")
    assert late.status == 0, late
    new.refresh_from_db()
    assert new.state == PodNic.State.ATTACHED
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [new.mac]
    found = link(new_ns)
    assert found["address"] == new.mac and "UP" in found["flags"]
    assert inet(found) == [(str(new.ip), 24)]
    check = runtime.driver("check", conflist, pod="web", netns=new_ns, cid="c2")
    assert check.status == 0, check


def test_a_recreated_sandbox_keeps_exactly_one_nic(
    runtime: Runtime, namespaces: Callable[[], str]
) -> None:
    """The old sandbox died without a DEL: the new sandbox's ADD releases its NIC before
    attaching one, so the pod never has two billed NICs; the old sandbox's DEL, late, is a
    success that changes nothing."""
    world = runtime.world
    world.pod("web")
    conflist = runtime.conflist("1.0.0")
    old_ns, new_ns = namespaces(), namespaces()
    _, old = runtime.add(conflist, pod="web", netns=old_ns, cid="c1")
    subprocess.run(["ip", "netns", "del", old_ns], check=True)  # the sandbox is gone

    _, new = runtime.add(conflist, pod="web", netns=new_ns, cid="c2")
    old.refresh_from_db()
    assert old.state == PodNic.State.RELEASED
    assert [n["mac_address"] for n in world.sim_nics(world.vm(0))] == [new.mac]
    late = runtime.driver("del", conflist, pod="web", netns=old_ns, cid="c1")
    assert late.status == 0, late
    new.refresh_from_db()
    assert new.state == PodNic.State.ATTACHED


def test_a_del_for_a_sandbox_that_holds_nothing_changes_nothing(
    runtime: Runtime, namespaces: Callable[[], str]
) -> None:
    world = runtime.world
    world.pod("web")
    conflist = runtime.conflist("1.0.0")
    netns = namespaces()
    _, row = runtime.add(conflist, pod="web", netns=netns, cid="c1")
    calls = len(world.nic_calls())
    other = runtime.driver("del", conflist, pod="web", netns=namespaces(), cid="c9")
    assert other.status == 0, other
    row.refresh_from_db()
    assert row.state == PodNic.State.ATTACHED
    assert len(world.nic_calls()) == calls


def test_a_repeated_add_is_an_error_and_changes_nothing(
    runtime: Runtime, namespaces: Callable[[], str]
) -> None:
    world = runtime.world
    world.pod("web")
    conflist = runtime.conflist("1.0.0")
    netns = namespaces()
    _, row = runtime.add(conflist, pod="web", netns=netns, cid="c1")
    calls = len(world.nic_calls())

    again = runtime.driver("add", conflist, pod="web", netns=netns, cid="c1")
    error = again.error
    assert error["code"] == 103, error
    assert "already has an interface net1" in error["msg"]
    assert len(world.nic_calls()) == calls
    row.refresh_from_db()
    assert row.state == PodNic.State.ATTACHED
    assert link(netns)["address"] == row.mac


def test_the_result_carries_the_previous_interfaces_and_ips(
    runtime: Runtime, namespaces: Callable[[], str]
) -> None:
    world = runtime.world
    world.pod("web")
    netns = namespaces()
    conflist = runtime.conflist("1.0.0", chain="loopback")
    result, row = runtime.add(conflist, pod="web", netns=netns, cid="c1")
    assert [i["name"] for i in result["interfaces"]] == ["lo", "net1"]
    assert {"address": "127.0.0.1/8", "interface": 0} in result["ips"]
    assert {"address": f"{row.ip}/24", "gateway": "10.50.0.1", "interface": 1} in result["ips"]
    check = runtime.driver("check", conflist, pod="web", netns=netns, cid="c1")
    assert check.status == 0, check


@pytest.mark.parametrize("version", ["0.4.0", "1.0.0"])
def test_the_result_carries_the_previous_routes_and_dns(
    runtime: Runtime, namespaces: Callable[[], str], version: str
) -> None:
    world = runtime.world
    world.pod("web")
    netns = namespaces()
    conflist = runtime.conflist(version, chain="static")
    result, row = runtime.add(conflist, pod="web", netns=netns, cid="c1")
    assert result["routes"] == [{"dst": "198.51.100.0/24", "gw": "192.0.2.1"}]
    assert result["dns"] == {"nameservers": ["192.0.2.53"], "search": ["example.test"]}
    addresses = [ip_["address"] for ip_ in result["ips"]]
    assert addresses == ["192.0.2.10/24", f"{row.ip}/24"]
    assert result["ips"][1]["interface"] == 0
    assert [i["name"] for i in result["interfaces"]] == ["net1"]


def test_check_compares_with_prev_result(runtime: Runtime, namespaces: Callable[[], str]) -> None:
    """A later plugin (tuning) changed the MAC, as the spec allows: CHECK holds the pod to
    the result, not to what the agent recorded; an address gone is a failed CHECK."""
    world = runtime.world
    world.pod("web")
    netns = namespaces()
    conflist = runtime.conflist("1.0.0", chain="mac")
    result, row = runtime.add(conflist, pod="web", netns=netns, cid="c1")
    assert result["interfaces"][0]["mac"] == TUNED_MAC
    check = runtime.driver("check", conflist, pod="web", netns=netns, cid="c1")
    assert check.status == 0, check

    subprocess.run(["ip", "-n", netns, "addr", "del", f"{row.ip}/24", "dev", "net1"], check=True)
    broken = runtime.driver("check", conflist, pod="web", netns=netns, cid="c1")
    assert broken.error["code"] == 102
    assert f"{row.ip}/24" in broken.error["msg"]
    done = runtime.driver("del", conflist, pod="web", netns=netns, cid="c1")
    assert done.status == 0, done


# --- issue 16: a node's plugin acts with its node's token, for that node only ------------


def test_the_plugin_dir_holds_the_nodes_own_token_not_the_enrollment_token(
    runtime: Runtime,
) -> None:
    token = (runtime.conf_dir / "token").read_text().strip()
    assert token != runtime.world.enrollment_token
    row = AgentToken.objects.get(node_name="node-0")
    assert token.startswith(f"cvsriov_{row.key_id}_")
    assert (runtime.conf_dir / "node-name").read_text() == "node-0\n"
    assert (runtime.conf_dir / "agent-url").read_text() == runtime.agent_url + "\n"


def test_another_nodes_plugin_can_neither_delete_nor_gc_this_nodes_nic(
    runtime: Runtime, namespaces: Callable[[], str], tmp_path: Path, settings: Any
) -> None:
    world = runtime.world
    world.pod("web")
    netns = namespaces()
    conflist = runtime.conflist("1.0.0")
    _, row = runtime.add(conflist, pod="web", netns=netns, cid="c1")
    node_1 = tmp_path / "node-1.d"
    node_1.mkdir()
    for name, content in (
        ("token", world.node_token(1)),
        ("node-name", "node-1"),
        ("agent-url", runtime.agent_url),
    ):
        (node_1 / name).write_text(content + "\n")
    (tmp_path / "node-1-cache").mkdir()
    elsewhere = replace(runtime, conf_dir=node_1, cache_dir=tmp_path / "node-1-cache")
    refused = elsewhere.driver("del", conflist, pod="web", netns=namespaces(), cid="c1")
    assert refused.error["code"] == 100 and "another node's VM" in refused.error["msg"]
    settings.SRIOV_RECLAIM_GRACE_SECONDS = 0
    nothing_valid = ("-valid", "[]")
    gc = elsewhere.driver("gc", runtime.conflist("1.1.0", chain=""), pod="", more=nothing_valid)
    assert gc.status == 0, gc
    row.refresh_from_db()
    assert row.state == PodNic.State.ATTACHED
    assert row.mac in {n["mac_address"] for n in world.sim_nics(world.vm(0))}
    done = runtime.driver("del", conflist, pod="web", netns=netns, cid="c1")
    assert done.status == 0, done
    row.refresh_from_db()
    assert row.state == PodNic.State.RELEASED


# --- issue 16: the token goes only to the agent URL of the plugin's own directory ----------


class Listener:
    """A local HTTP server that records what reaches it; answers `status` (with Location)."""

    def __init__(self, status: int = 200, location: str = "") -> None:
        self.requests: list[dict[str, Any]] = []
        recorded = self.requests

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                recorded.append({"path": self.path, "headers": dict(self.headers)})
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"detail": "listener"}')

            do_GET = do_POST = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Callable[..., Listener]]:
    made: list[Listener] = []

    def make(status: int = 200, location: str = "") -> Listener:
        made.append(Listener(status, location))
        return made[-1]

    yield make
    for one in made:
        one.close()


@pytest.mark.parametrize("command", ["add", "del"])
def test_a_network_config_cannot_send_the_token_elsewhere(
    runtime: Runtime, namespaces: Callable[[], str], listener: Callable[..., Listener],
    command: str,
) -> None:  # fmt: skip
    world = runtime.world
    world.pod("web")
    elsewhere = listener()
    conflist = runtime.conflist(
        "1.0.0",
        agentUrl=elsewhere.url,
        tokenFile=str(runtime.conf_dir / "token"),
        nodeNameFile="/etc/hostname",
    )
    answer = runtime.driver(command, conflist, pod="web", netns=namespaces(), cid="c1")
    assert answer.error["code"] == 2, answer.error  # unsupported field
    assert "agentUrl" in answer.error["msg"] and str(runtime.conf_dir) in answer.error["msg"]
    assert elsewhere.requests == []


def test_the_plugin_follows_no_redirect(
    runtime: Runtime, namespaces: Callable[[], str], listener: Callable[..., Listener]
) -> None:
    world = runtime.world
    world.pod("web")
    target = listener()
    redirecting = listener(307, location=target.url + "api/v1/sriov/agent/nics/")
    (runtime.conf_dir / "agent-url").write_text(redirecting.url + "\n")
    answer = runtime.driver(
        "add", runtime.conflist("1.0.0"), pod="web", netns=namespaces(), cid="c1"
    )
    assert "redirect" in answer.error["msg"] and "307" in answer.error["msg"], answer.error
    assert len(redirecting.requests) == 1
    assert target.requests == []


# --- CNI 1.1: GC and STATUS ----------------------------------------------------------------


def test_add_check_del_at_1_1_0(runtime: Runtime, namespaces: Callable[[], str]) -> None:
    """libcni 1.1.2 cannot parse a 1.1.0 result, so a 1.1 runtime is played here: the
    result is 1.0.0's format under cniVersion 1.1.0."""
    world = runtime.world
    world.pod("web")
    netns = namespaces()
    config = {"cniVersion": "1.1.0", "name": "capvco-sriov", "type": "capvco-sriov"}
    running = runtime.plugin("ADD", config, pod="web", netns=netns, cid="c1")
    result, row = runtime.add(Path(), pod="web", netns=netns, cid="c1", running=running)
    assert result == {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "net1", "mac": row.mac, "sandbox": f"/var/run/netns/{netns}"}],
        "ips": [{"address": f"{row.ip}/24", "gateway": "10.50.0.1", "interface": 0}],
        "routes": [],
        "dns": {},
    }
    check = runtime.plugin(
        "CHECK", {**config, "prevResult": result}, pod="web", netns=netns, cid="c1"
    )
    assert check.communicate(timeout=60) == ("", "") and check.returncode == 0
    done = runtime.plugin("DEL", {**config, "prevResult": result}, pod="web", netns=netns, cid="c1")
    assert done.communicate(timeout=60)[0] == "" and done.returncode == 0
    row.refresh_from_db()
    assert row.state == PodNic.State.RELEASED


def test_gc_releases_this_nodes_nics_of_attachments_no_longer_valid(
    runtime: Runtime, namespaces: Callable[[], str], settings: Any
) -> None:
    world = runtime.world
    for name in ("web", "db", "slow", "elsewhere"):
        world.pod(name)
    world.pod("away", node=1)
    conflist = runtime.conflist("1.0.0")
    _, stale = runtime.add(conflist, pod="web", netns=namespaces(), cid="c1")
    _, valid = runtime.add(conflist, pod="db", netns=namespaces(), cid="c2")
    ours = "capvco-sriov"
    away = world.add("away", node=1, container_id="c3", cni_network=ours)  # another node's
    in_flight = world.add("slow", container_id="c4", cni_network=ours)
    world.add("elsewhere", container_id="c5", cni_network="another-network")
    # Its attach under way (after the last queue run of the VM: a run would resolve it).
    PodNic.objects.filter(pk=in_flight.pk).update(state=PodNic.State.ATTACHING)
    gc = runtime.conflist("1.1.0", chain="")
    only_c2 = ("-valid", json.dumps([{"containerID": "c2", "ifname": "net1"}]))

    young = runtime.driver("gc", gc, pod="", more=only_c2)
    assert young.status == 0, young
    stale.refresh_from_db()
    assert stale.state == PodNic.State.ATTACHED  # asked for within the reclaim grace

    settings.SRIOV_RECLAIM_GRACE_SECONDS = 0
    done = runtime.driver("gc", gc, pod="", more=only_c2)
    assert done.status == 0, done
    # GC queued the stale NIC's detach on its VM and answered; the attach under way is
    # left alone (kept, no detach queued for it).
    queued = {row.container_id for row in PodNic.objects.filter(detach_queued_at__isnull=False)}
    assert queued == {"c1"}
    # The VM's queue (the worker) resolves the attach at its head, then detaches c1.
    deadline = time.monotonic() + 30
    while PodNic.objects.get(container_id="c1").state != PodNic.State.RELEASED:
        assert time.monotonic() < deadline, "the queued detach was not made"
        time.sleep(0.1)
    states = {row.container_id: row.state for row in PodNic.objects.all()}
    assert states == {
        "c1": PodNic.State.RELEASED,
        "c2": PodNic.State.ATTACHED,
        "c3": PodNic.State.ATTACHED,
        "c4": PodNic.State.ATTACHED,  # its attach resolved, never released by GC
        "c5": PodNic.State.ATTACHED,
    }
    macs = {n["mac_address"] for n in world.sim_nics(world.vm(0))}
    assert stale.mac not in macs and {valid.mac, in_flight.mac} <= macs
    assert PodNic.objects.get(container_id="c1").cni_network == ours
    assert away.mac in {n["mac_address"] for n in world.sim_nics(world.vm(1))}
    event = AuditEvent.objects.filter(action="sriov.nic_release").get()
    assert "CNI GC" in event.reason and event.actor_name == "sriov-agent"


def test_gc_before_1_1_0_sends_nothing(runtime: Runtime, namespaces: Callable[[], str]) -> None:
    world = runtime.world
    world.pod("web")
    conflist = runtime.conflist("1.0.0")
    _, row = runtime.add(conflist, pod="web", netns=namespaces(), cid="c1")
    answer = runtime.driver("gc", conflist, pod="")  # libcni sends GC from 1.1.0 on only
    assert answer.status == 0, answer
    row.refresh_from_db()
    assert row.state == PodNic.State.ATTACHED


def test_status_says_whether_an_add_can_be_served(runtime: Runtime) -> None:
    conflist = runtime.conflist("1.1.0", chain="")
    ready = runtime.driver("status", conflist, pod="")
    assert ready.status == 0, ready
    (runtime.conf_dir / "agent-url").unlink()
    broken = runtime.driver("status", conflist, pod="")
    assert broken.error["code"] == 50
    assert "agent-url" in broken.error["msg"]
