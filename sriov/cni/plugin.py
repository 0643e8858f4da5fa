"""capvco-sriov: a CNI plugin (spec 1.0.0) that gives a pod its own NIC on an external
whitesky network.

ADD asks the control plane's agent API for the pod's NIC (attached to this node's VM),
waits for the interface with that MAC to show up on the host, moves it into the pod's
network namespace, names it CNI_IFNAME, sets its address and MTU, and brings it up. It
leaves the default route alone: that is the primary network's. DEL moves the interface
back to the host (when the namespace still exists) and asks the agent API to detach the
NIC; it succeeds when there is nothing left to do, also when the namespace is gone.
CHECK compares the pod's interface with what the agent API recorded. VERSION says which
versions it speaks.

Network configuration (stdin), beside the standard `cniVersion`, `name`, `type`:

    agentUrl               the agent API, e.g. https://capvco.example/api/v1/sriov/agent/
    tokenFile              file holding the cluster's agent token
    nodeName | nodeNameFile  this node's Kubernetes name (default: the host name)
    caFile                 CA bundle for the agent API (default: the system's)
    interfaceWaitSeconds   how long ADD waits for the NIC to appear (default 30)
    requestTimeoutSeconds  how long one agent call may take (default 90)

Standard library and pyroute2 only, and nothing imported that is not needed: it runs for
every pod. Errors are CNI error objects on stdout with a non-zero exit status; never a
traceback.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, NoReturn

CNI_VERSION = "1.0.0"
SUPPORTED_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"]
ALIAS_PREFIX = "capvco-sriov:"  # the interface's alias keeps its host name for DEL

# Error codes of the CNI spec; 100+ are ours.
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
CONTAINER_UNKNOWN = 3
INVALID_ENVIRONMENT = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
AGENT_REFUSED = 100
INTERFACE_MISSING = 101
CHECK_FAILED = 102


class CniError(Exception):
    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code, self.msg, self.details = code, msg, details


# --- input --------------------------------------------------------------------------------


def _env(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "").strip()
    if not value:
        raise CniError(INVALID_ENVIRONMENT, f"{name} is not set")
    return value


def cni_args(environ: Mapping[str, str]) -> dict[str, str]:
    """CNI_ARGS: `K8S_POD_NAMESPACE=ns;K8S_POD_NAME=name;K8S_POD_UID=uid;...`."""
    found: dict[str, str] = {}
    for part in environ.get("CNI_ARGS", "").split(";"):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            found[key.strip()] = value.strip()
    return found


def network_config(raw: str) -> dict[str, Any]:
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise CniError(DECODE_FAILURE, f"the network configuration is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise CniError(DECODE_FAILURE, "the network configuration is not a JSON object")
    version = config.get("cniVersion", CNI_VERSION)
    if version not in SUPPORTED_VERSIONS:
        raise CniError(
            INCOMPATIBLE_VERSION,
            f"cniVersion {version} is not supported",
            f"supported: {', '.join(SUPPORTED_VERSIONS)}",
        )
    for key in ("agentUrl", "tokenFile"):
        if not isinstance(config.get(key), str) or not config[key]:
            raise CniError(INVALID_CONFIG, f"the network configuration has no {key}")
    return config


def _pod(environ: Mapping[str, str]) -> dict[str, str]:
    args = cni_args(environ)
    uid = args.get("K8S_POD_UID", "")
    if not uid:
        raise CniError(
            INVALID_ENVIRONMENT,
            "CNI_ARGS has no K8S_POD_UID: the NIC belongs to a pod, named by its uid",
        )
    return {
        "pod_uid": uid,
        "namespace": args.get("K8S_POD_NAMESPACE", ""),
        "pod_name": args.get("K8S_POD_NAME", ""),
    }


def _read_file(path: str, what: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError as exc:
        raise CniError(IO_FAILURE, f"cannot read the {what} at {path}: {exc.strerror}") from None


def node_name(config: Mapping[str, Any]) -> str:
    if isinstance(config.get("nodeName"), str) and config["nodeName"]:
        return str(config["nodeName"])
    if isinstance(config.get("nodeNameFile"), str) and config["nodeNameFile"]:
        return _read_file(config["nodeNameFile"], "node name")
    return socket.gethostname()


# --- the agent API ------------------------------------------------------------------------


class Agent:
    def __init__(self, config: Mapping[str, Any]) -> None:
        self.url = str(config["agentUrl"]).rstrip("/") + "/"
        self.token = _read_file(str(config["tokenFile"]), "agent token")
        self.timeout = float(config.get("requestTimeoutSeconds", 90))
        self.context = None
        if self.url.startswith("https:"):
            self.context = ssl.create_default_context(cafile=config.get("caFile") or None)

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """The JSON answer (None for 204); 404 answers None when `method` is GET or
        DELETE; other failures raise CniError."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310 - the URL is the operator's config
            self.url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                with urllib.request.urlopen(  # noqa: S310
                    request, timeout=max(deadline - time.monotonic(), 1), context=self.context
                ) as response:
                    raw = response.read()
                    return json.loads(raw) if raw else None
            except urllib.error.HTTPError as exc:
                detail = _detail(exc)
                if exc.code == 404 and method in ("GET", "DELETE"):
                    return None
                wait = _retry_after(exc)
                if exc.code in (502, 503, 504) and time.monotonic() + wait < deadline:
                    time.sleep(wait)  # the VM's queue, or whitesky, is busy: try again
                    continue
                code = TRY_AGAIN_LATER if exc.code >= 500 or exc.code == 429 else AGENT_REFUSED
                raise CniError(code, f"agent API: HTTP {exc.code}: {detail}") from None
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                raise CniError(TRY_AGAIN_LATER, f"agent API unreachable: {reason}") from None


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
    except (ValueError, OSError):
        return exc.reason or ""
    if isinstance(body, dict):
        for key in ("detail", "message", "msg"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return str(body)[:500]


def _retry_after(exc: urllib.error.HTTPError) -> float:
    try:
        return min(max(float(exc.headers.get("Retry-After", "1")), 0.2), 10.0)
    except ValueError:
        return 1.0


# --- netlink ------------------------------------------------------------------------------


def _netns_path(value: str) -> str:
    return value if "/" in value else f"/var/run/netns/{value}"


def _wait_for_link(mac: str, seconds: float) -> int:
    from pyroute2 import IPRoute

    deadline = time.monotonic() + seconds
    with IPRoute() as ipr:
        while True:
            found = ipr.link_lookup(address=mac)
            if found:
                return int(found[0])
            if time.monotonic() >= deadline:
                raise CniError(
                    INTERFACE_MISSING,
                    f"the NIC {mac} was attached to this node's VM but no interface with that "
                    f"MAC appeared within {seconds:.0f} s",
                )
            time.sleep(0.1)


def _in_pod(netns: str, ifname: str, mac: str) -> bool:
    """Whether the pod already holds the NIC under `ifname` (a repeated ADD)."""
    from pyroute2 import NetNS

    with NetNS(netns) as ns:
        found = ns.link_lookup(ifname=ifname)
        return bool(found) and _link_mac(ns, found[0]) == mac


def _link_mac(ns: Any, index: int) -> str:
    (link,) = ns.get_links(index)
    return str(link.get_attr("IFLA_ADDRESS") or "").lower()


def nic_move_in(
    *, mac: str, netns: str, ifname: str, address: str, prefix: int, mtu: int, wait: float
) -> None:
    from pyroute2 import IPRoute, NetNS

    if not _in_pod(netns, ifname, mac):
        index = _wait_for_link(mac, wait)
        with IPRoute() as ipr:
            (link,) = ipr.get_links(index)
            host_name = link.get_attr("IFLA_IFNAME")
            ipr.link("set", index=index, state="down")
            ipr.link("set", index=index, ifalias=f"{ALIAS_PREFIX}{host_name}")
            ipr.link("set", index=index, net_ns_fd=netns)
    with NetNS(netns) as ns:
        found = ns.link_lookup(address=mac)
        if not found:
            raise CniError(INTERFACE_MISSING, f"the NIC {mac} is not in {netns} after the move")
        index = found[0]
        ns.link("set", index=index, ifname=ifname)
        present = {
            (a.get_attr("IFA_ADDRESS"), a["prefixlen"]) for a in ns.get_addr(index=index, family=2)
        }
        if (address, prefix) not in present:
            ns.addr("add", index=index, address=address, prefixlen=prefix)
        ns.link("set", index=index, mtu=mtu, state="up")


def nic_move_out(*, netns: str, ifname: str) -> str | None:
    """Move the pod's NIC back to the host under its host name; None when there is no
    namespace or no such interface (nothing to do). Answers the NIC's MAC."""
    from pyroute2 import NetNS

    if not os.path.exists(netns):
        return None
    host = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        with NetNS(netns) as ns:
            found = ns.link_lookup(ifname=ifname)
            if not found:
                return None
            (link,) = ns.get_links(found[0])
            alias = str(link.get_attr("IFLA_IFALIAS") or "")
            if not alias.startswith(ALIAS_PREFIX):
                return None  # not one of ours: leave it alone
            mac = str(link.get_attr("IFLA_ADDRESS") or "").lower()
            # Down, back under its host name; the move drops its addresses.
            ns.link("set", index=found[0], state="down")
            ns.link("set", index=found[0], ifname=alias[len(ALIAS_PREFIX) :][:15] or ifname)
            ns.link("set", index=found[0], net_ns_fd=host)
            return mac
    finally:
        os.close(host)


# --- the commands -------------------------------------------------------------------------


def _result(nic: Mapping[str, Any], *, ifname: str, netns: str, version: str) -> dict[str, Any]:
    address = f"{nic['address']}/{nic['prefix']}"
    ip: dict[str, Any] = {"address": address, "interface": 0}
    if nic.get("gateway"):
        ip["gateway"] = nic["gateway"]
    if version in ("0.3.0", "0.3.1"):
        ip["version"] = "4"
    return {
        "cniVersion": version,
        "interfaces": [{"name": ifname, "mac": nic["mac"], "sandbox": netns}],
        "ips": [ip],
        "routes": [],
        "dns": {},
    }


def cmd_add(config: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    netns = _netns_path(_env(environ, "CNI_NETNS"))
    ifname = _env(environ, "CNI_IFNAME")
    container_id = _env(environ, "CNI_CONTAINERID")
    pod = _pod(environ)
    if not os.path.exists(netns):
        raise CniError(CONTAINER_UNKNOWN, f"the network namespace {netns} does not exist")
    agent = Agent(config)
    nic = agent.call(
        "POST",
        "nics/",
        {**pod, "node_name": node_name(config), "container_id": container_id, "ifname": ifname},
    )
    if not isinstance(nic, dict) or not nic.get("mac") or not nic.get("address"):
        raise CniError(AGENT_REFUSED, f"the agent API answered no NIC: {nic!r:.200}")
    try:
        nic_move_in(
            mac=str(nic["mac"]).lower(),
            netns=netns,
            ifname=ifname,
            address=str(nic["address"]),
            prefix=int(nic["prefix"]),
            mtu=int(nic.get("mtu") or 1500),
            wait=float(config.get("interfaceWaitSeconds", 30)),
        )
    except CniError:
        raise
    except Exception as exc:  # netlink refused: say what, not where
        raise CniError(IO_FAILURE, f"configuring the NIC {nic['mac']}: {exc}") from None
    return _result(
        nic, ifname=ifname, netns=netns, version=str(config.get("cniVersion", CNI_VERSION))
    )


def cmd_del(config: dict[str, Any], environ: Mapping[str, str]) -> None:
    ifname = environ.get("CNI_IFNAME", "").strip()
    raw_netns = environ.get("CNI_NETNS", "").strip()
    pod = _pod(environ)
    if raw_netns and ifname:
        try:
            nic_move_out(netns=_netns_path(raw_netns), ifname=ifname)
        except Exception as exc:  # the namespace went away under us: detach all the same
            print(f"capvco-sriov: moving {ifname} out of {raw_netns}: {exc}", file=sys.stderr)
    Agent(config).call("DELETE", f"nics/{pod['pod_uid']}/")


def cmd_check(config: dict[str, Any], environ: Mapping[str, str]) -> None:
    from pyroute2 import NetNS

    netns = _netns_path(_env(environ, "CNI_NETNS"))
    ifname = _env(environ, "CNI_IFNAME")
    _env(environ, "CNI_CONTAINERID")
    pod = _pod(environ)
    nic = Agent(config).call("GET", f"nics/{pod['pod_uid']}/")
    if not isinstance(nic, dict) or nic.get("state") != "attached":
        raise CniError(CHECK_FAILED, f"the agent API has no attached NIC for pod {pod['pod_uid']}")
    if not os.path.exists(netns):
        raise CniError(CONTAINER_UNKNOWN, f"the network namespace {netns} does not exist")
    with NetNS(netns) as ns:
        found = ns.link_lookup(ifname=ifname)
        if not found:
            raise CniError(CHECK_FAILED, f"the pod has no interface {ifname}")
        mac = _link_mac(ns, found[0])
        addresses = {
            (a.get_attr("IFA_ADDRESS"), a["prefixlen"])
            for a in ns.get_addr(index=found[0], family=2)
        }
    if mac != str(nic["mac"]).lower():
        raise CniError(CHECK_FAILED, f"{ifname} has MAC {mac}, the NIC is {nic['mac']}")
    if (nic["address"], int(nic["prefix"])) not in addresses:
        raise CniError(CHECK_FAILED, f"{ifname} lacks the address {nic['address']}/{nic['prefix']}")


def cmd_version(config_raw: str) -> dict[str, Any]:
    version = CNI_VERSION
    try:
        given = json.loads(config_raw).get("cniVersion") if config_raw.strip() else None
    except (ValueError, AttributeError):
        given = None
    if isinstance(given, str) and given in SUPPORTED_VERSIONS:
        version = given
    return {"cniVersion": version, "supportedVersions": SUPPORTED_VERSIONS}


def run(environ: Mapping[str, str], stdin: str) -> tuple[int, dict[str, Any] | None]:
    """The exit status and what goes to stdout."""
    command = environ.get("CNI_COMMAND", "").strip()
    version = CNI_VERSION
    try:
        if command == "VERSION":
            return 0, cmd_version(stdin)
        if not command:
            raise CniError(INVALID_ENVIRONMENT, "CNI_COMMAND is not set")
        config = network_config(stdin)
        version = str(config.get("cniVersion", CNI_VERSION))
        if command == "ADD":
            return 0, cmd_add(config, environ)
        if command == "DEL":
            cmd_del(config, environ)
            return 0, None
        if command == "CHECK":
            cmd_check(config, environ)
            return 0, None
        if command in ("STATUS", "GC"):
            raise CniError(INCOMPATIBLE_VERSION, f"{command} is CNI 1.1; this plugin speaks 1.0.0")
        raise CniError(INVALID_ENVIRONMENT, f"unknown CNI_COMMAND {command!r}")
    except CniError as exc:
        error: dict[str, Any] = {"cniVersion": version, "code": exc.code, "msg": exc.msg}
        if exc.details:
            error["details"] = exc.details
        return 1, error
    except Exception as exc:  # a bug of ours: still a CNI error, never a traceback
        return 1, {
            "cniVersion": version,
            "code": IO_FAILURE,
            "msg": f"unexpected failure: {type(exc).__name__}",
            "details": str(exc)[:500],
        }


def main() -> NoReturn:
    stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    status, output = run(os.environ, stdin)
    if output is not None:
        sys.stdout.write(json.dumps(output) + "\n")
    sys.stdout.flush()
    sys.exit(status)


if __name__ == "__main__":
    main()
