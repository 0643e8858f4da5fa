"""capvco-sriov: a CNI plugin (spec 1.0.0 and 1.1.0; results for 0.3.x and 0.4.0 too)
that gives a pod its own NIC on an external whitesky network.

ADD asks the control plane's agent API for the NIC of the attachment (CNI_CONTAINERID,
CNI_IFNAME) of the pod (attached to this node's VM): the agent answers it at once, or
queues the request (202) and the plugin polls it, after the wait the answer asks for
(its `retry_after_ms`, else Retry-After), until the NIC is attached or its timeout. It
then waits for the interface with that MAC to show up on the host, moves it into the
pod's network namespace, names it CNI_IFNAME, sets its address and MTU, and brings it
up. It leaves the default route alone: that is the primary network's. In a chain, the
result carries the previous result's interfaces, ips, routes and dns, and ours after
them. An interface of that name already in the container is an error (a repeated ADD):
nothing is asked for. DEL moves the interface back to the host (when the namespace still
exists) and asks the agent API to detach the attachment's NIC: the agent queues the
detach on the VM (202) and the plugin polls it, as it polls an ADD, until the NIC is
released; a sandbox that holds none is a success that changes nothing, also when the
namespace is gone. CHECK holds the pod's interface to prevResult (its MAC and
addresses) and asks the agent API whether the attachment still has its NIC. GC (1.1.0)
asks the agent API to release this node's NICs of attachments that are not in
`cni.dev/valid-attachments` (queued on their VMs, not waited for); STATUS (1.1.0) says
whether the plugin can serve an ADD.
VERSION says which versions it speaks.

Where to call, with what, and as which node come only from the plugin's own directory,
`/etc/cni/net.d/capvco-sriov.d/` (or $CAPVCO_SRIOV_CONF_DIR, which the runtime's
environment may set and a network configuration cannot), as the installer writes it:

    agent-url   the agent API, e.g. https://capvco.example/api/v1/sriov/agent/
    token       the agent token
    node-name   this node's Kubernetes name
    ca.crt      (optional) the CA bundle for the agent API (default: the system's)

A network configuration that names any of these (`agentUrl`, `tokenFile`, `nodeName`,
`nodeNameFile`, `caFile`) is refused: whoever may create a NetworkAttachmentDefinition
must not send the token elsewhere. No redirect is followed and no proxy is used: the
token goes to that URL only. The network configuration may set, beside `cniVersion`,
`name`, `type`:

    interfaceWaitSeconds   how long ADD waits for the NIC to appear (default 30)
    requestTimeoutSeconds  how long ADD waits for the agent API's NIC, and DEL for
                           its detach, polls included, and how long any other agent
                           call may take
                           (default 80: with interfaceWaitSeconds, inside the kubelet's
                           2-minute runtime request timeout)

Standard library and pyroute2 only, and nothing imported that is not needed: it runs for
every pod. Errors are CNI error objects on stdout with a non-zero exit status; never a
traceback.
"""

from __future__ import annotations

import ipaddress
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, NoReturn

CNI_VERSION = "1.0.0"
SUPPORTED_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
ALIAS_PREFIX = "capvco-sriov:"  # the interface's alias keeps its host name for DEL
CONF_DIR = "/etc/cni/net.d/capvco-sriov.d"
CONF_DIR_ENV = "CAPVCO_SRIOV_CONF_DIR"
# Keys an older network configuration carried; now only the plugin's directory says.
NODE_KEYS = ("agentUrl", "tokenFile", "nodeName", "nodeNameFile", "caFile")

# Error codes of the CNI spec; 100+ are ours.
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
CONTAINER_UNKNOWN = 3
INVALID_ENVIRONMENT = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
NOT_AVAILABLE = 50  # STATUS: cannot serve an ADD
AGENT_REFUSED = 100
INTERFACE_MISSING = 101
CHECK_FAILED = 102
INTERFACE_EXISTS = 103
# Failures of a queued ADD (the request's `failure_code`) that an ADD again may get past.
RETRYABLE_FAILURES = ("whitesky_unavailable",)


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
    named = [key for key in NODE_KEYS if key in config]
    if named:
        raise CniError(
            UNSUPPORTED_FIELD,
            f"the network configuration sets {', '.join(named)}: the agent URL, token and "
            f"node name come only from the plugin's directory {conf_dir(os.environ)} "
            "(agent-url, token, node-name); remove them from the NetworkAttachmentDefinition",
        )
    return config


def conf_dir(environ: Mapping[str, str]) -> str:
    return environ.get(CONF_DIR_ENV, "").strip() or CONF_DIR


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


def _attachment(environ: Mapping[str, str]) -> dict[str, str]:
    """(CNI_CONTAINERID, CNI_IFNAME): the key of the NIC, as the spec says."""
    return {
        "container_id": _env(environ, "CNI_CONTAINERID"),
        "ifname": _env(environ, "CNI_IFNAME"),
    }


def _read_file(path: str, what: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError as exc:
        raise CniError(IO_FAILURE, f"cannot read the {what} at {path}: {exc.strerror}") from None


class NodeConfig:
    """What the installer wrote into the plugin's directory."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        folder = conf_dir(environ)
        self.url = _read_file(os.path.join(folder, "agent-url"), "agent URL").rstrip("/") + "/"
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CniError(
                INVALID_CONFIG,
                f"{folder}/agent-url holds no http(s) URL of the agent API: {self.url[:200]!r}",
            )
        self.token = _read_file(os.path.join(folder, "token"), "agent token")
        self.node_name = _read_file(os.path.join(folder, "node-name"), "node name")
        if not self.token or not self.node_name:
            raise CniError(INVALID_CONFIG, f"{folder}/token or {folder}/node-name is empty")
        ca = os.path.join(folder, "ca.crt")
        self.cafile = ca if os.path.exists(ca) else None
        self.folder = folder


# --- the agent API ------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is refused: the token goes to the agent URL of the plugin's directory
    and nowhere else."""

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> None:
        fp.close()
        raise CniError(
            AGENT_REFUSED,
            f"agent API answered a redirect (HTTP {code} to {newurl[:200]}): refused, the "
            "agent URL must name the agent API itself",
        )


class Agent:
    def __init__(self, config: Mapping[str, Any], node: NodeConfig) -> None:
        self.url = node.url
        self.token = node.token
        self.timeout = float(config.get("requestTimeoutSeconds", 80))
        handlers: list[Any] = [urllib.request.ProxyHandler({}), _NoRedirect()]
        if self.url.startswith("https:"):
            context = ssl.create_default_context(cafile=node.cafile)
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self.opener = urllib.request.build_opener(*handlers)

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
        deadline: float | None = None,
    ) -> Any:
        """The JSON answer (None for 204); 404 answers None when `method` is GET or
        DELETE; other failures raise CniError."""
        return self.exchange(method, path, body, query, deadline)[1]

    def exchange(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
        deadline: float | None = None,
    ) -> tuple[int, Any, float]:
        """The status, the JSON answer and the Retry-After it gave (seconds), as `call`
        answers; 429 and 502-504 are asked again after Retry-After until `deadline`
        (default: the request timeout from now)."""
        data = json.dumps(body).encode() if body is not None else None
        url = self.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        request = urllib.request.Request(  # noqa: S310 - the URL is the installer's, http(s)
            url,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        while True:
            try:
                with self.opener.open(
                    request, timeout=max(deadline - time.monotonic(), 1)
                ) as response:
                    raw = response.read()
                    return (
                        response.status,
                        json.loads(raw) if raw else None,
                        _retry_after(response.headers),
                    )
            except urllib.error.HTTPError as exc:
                detail = _detail(exc)
                if 300 <= exc.code < 400:
                    raise CniError(
                        AGENT_REFUSED, f"agent API answered a redirect (HTTP {exc.code}): refused"
                    ) from None
                if exc.code == 404 and method in ("GET", "DELETE"):
                    return exc.code, None, 0.0
                wait = _retry_after(exc.headers)
                if exc.code in (429, 502, 503, 504) and time.monotonic() + wait < deadline:
                    time.sleep(wait)  # the VM's turn, whitesky or our rate: try again
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


def _poll_wait(nic: Any, retry_after: float) -> float:
    """Seconds until a queued request is asked for again: the answer's `retry_after_ms`
    (finer than Retry-After, whose whole seconds would hold the pod up to a second past
    its NIC), else the Retry-After given."""
    hint = nic.get("retry_after_ms") if isinstance(nic, dict) else None
    if isinstance(hint, int) and not isinstance(hint, bool):
        return min(max(hint / 1000, 0.05), 10.0)
    return retry_after


def _retry_after(headers: Any) -> float:
    try:
        return min(max(float(headers.get("Retry-After", "1")), 0.2), 10.0)
    except (AttributeError, ValueError):
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


def _has_link(netns: str, ifname: str) -> bool:
    from pyroute2 import NetNS

    with NetNS(netns) as ns:
        return bool(ns.link_lookup(ifname=ifname))


def _link_mac(ns: Any, index: int) -> str:
    (link,) = ns.get_links(index)
    return str(link.get_attr("IFLA_ADDRESS") or "").lower()


def nic_move_in(
    *, mac: str, netns: str, ifname: str, address: str, prefix: int, mtu: int, wait: float
) -> None:
    from pyroute2 import IPRoute, NetNS

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


def _older_than_1(version: str) -> bool:
    return version.startswith("0.")


def _prev_result(config: Mapping[str, Any]) -> dict[str, Any]:
    """The previous plugin's result in the chain (libcni converts it to our version)."""
    prev = config.get("prevResult")
    if prev is None:
        return {}
    shapes = {"interfaces": list, "ips": list, "routes": list, "dns": dict}
    if not isinstance(prev, dict) or any(
        not isinstance(prev.get(key, kind()), kind) for key, kind in shapes.items()
    ):
        raise CniError(DECODE_FAILURE, "prevResult is not a CNI result")
    for key in ("interfaces", "ips", "routes"):
        if not all(isinstance(item, dict) for item in prev.get(key, [])):
            raise CniError(DECODE_FAILURE, f"prevResult's {key} are not objects")
    return prev


def _ip_version(address: str) -> str:
    try:
        return str(ipaddress.ip_interface(address).version)
    except ValueError:
        raise CniError(DECODE_FAILURE, f"prevResult has no address in {address!r}") from None


def _result(
    nic: Mapping[str, Any], *, ifname: str, netns: str, version: str, prev: Mapping[str, Any]
) -> dict[str, Any]:
    """Ours after the previous result's interfaces, ips, routes and dns, in the format of
    `version` (`ips[].version` before 1.0.0, none from 1.0.0)."""
    interfaces = [dict(item) for item in prev.get("interfaces", [])]
    ips = [dict(item) for item in prev.get("ips", [])]
    ours: dict[str, Any] = {"address": f"{nic['address']}/{nic['prefix']}"}
    if nic.get("gateway"):
        ours["gateway"] = nic["gateway"]
    ours["interface"] = len(interfaces)
    interfaces.append({"name": ifname, "mac": nic["mac"], "sandbox": netns})
    ips.append(ours)
    for ip in ips:
        if _older_than_1(version):
            ip["version"] = _ip_version(str(ip.get("address", "")))
        else:
            ip.pop("version", None)
    return {
        "cniVersion": version,
        "interfaces": interfaces,
        "ips": ips,
        "routes": [dict(item) for item in prev.get("routes", [])],
        "dns": dict(prev.get("dns", {})),
    }


def nic_wait(agent: Agent, body: Mapping[str, Any]) -> Any:
    """ADD at the agent API, then poll its request (GET, after the wait each answer asks
    for) until the NIC is attached, all within the request timeout. A failure worth trying
    again (`whitesky_unavailable`) is ADDed again while time is left; any other is the
    error."""
    deadline = time.monotonic() + agent.timeout
    where = f"nics/{urllib.parse.quote(str(body['pod_uid']))}/"
    key = {"container_id": str(body["container_id"]), "ifname": str(body["ifname"])}
    status, nic, wait = agent.exchange("POST", "nics/", body, deadline=deadline)
    while True:
        if not isinstance(nic, dict):
            raise CniError(
                AGENT_REFUSED,
                "the agent API no longer has the request for this NIC (a DEL cancelled it)",
            )
        state = nic.get("state")
        if status == 200 and state == "attached":
            return nic
        if status != 202 and state != "failed":
            raise CniError(AGENT_REFUSED, f"the agent API answered no NIC: {nic!r:.200}")
        again = time.monotonic() + wait < deadline
        if state == "failed":
            retryable = nic.get("failure_code") in RETRYABLE_FAILURES
            if not (retryable and again):
                raise CniError(
                    TRY_AGAIN_LATER if retryable else AGENT_REFUSED,
                    f"agent API: {nic.get('failure') or 'the attach failed'}",
                )
            time.sleep(wait)
            status, nic, wait = agent.exchange("POST", "nics/", body, deadline=deadline)
            continue
        wait = _poll_wait(nic, wait)
        if time.monotonic() + wait >= deadline:
            raise CniError(
                TRY_AGAIN_LATER,
                f"the NIC is still queued on this node's VM (place {nic.get('queue_position')}) "
                f"after {agent.timeout:.0f} s",
                str(nic.get("failure") or ""),
            )
        time.sleep(wait)
        status, nic, wait = agent.exchange("GET", where, query=key, deadline=deadline)


def cmd_add(config: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    netns = _netns_path(_env(environ, "CNI_NETNS"))
    key = _attachment(environ)
    ifname = key["ifname"]
    pod = _pod(environ)
    prev = _prev_result(config)
    if not os.path.exists(netns):
        raise CniError(CONTAINER_UNKNOWN, f"the network namespace {netns} does not exist")
    if _has_link(netns, ifname):
        raise CniError(
            INTERFACE_EXISTS,
            f"the container already has an interface {ifname}: an ADD for container "
            f"{key['container_id']} and {ifname} is not repeated without a DEL between",
        )
    node = NodeConfig(environ)
    nic = nic_wait(
        Agent(config, node),
        {**pod, **key, "node_name": node.node_name, "cni_network": _network_name(config)},
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
    version = str(config.get("cniVersion", CNI_VERSION))
    return _result(nic, ifname=ifname, netns=netns, version=version, prev=prev)


def cmd_del(config: dict[str, Any], environ: Mapping[str, str]) -> None:
    key = _attachment(environ)
    raw_netns = environ.get("CNI_NETNS", "").strip()
    pod = _pod(environ)
    node = NodeConfig(environ)
    if raw_netns:
        try:
            nic_move_out(netns=_netns_path(raw_netns), ifname=key["ifname"])
        except Exception as exc:  # the namespace went away under us: detach all the same
            print(
                f"capvco-sriov: moving {key['ifname']} out of {raw_netns}: {exc}", file=sys.stderr
            )
    nic_release_wait(Agent(config, node), pod["pod_uid"], key)


def nic_release_wait(agent: Agent, pod_uid: str, key: Mapping[str, str]) -> None:
    """DEL at the agent API, then, while its detach is queued on the VM (202), poll it (GET,
    after the wait each answer asks for) until the attachment holds no NIC (404), all
    within the request timeout. A 200 is a detach that failed: the error (a runtime asks
    again; one the agent may get past is `try again later`)."""
    deadline = time.monotonic() + agent.timeout
    where = f"nics/{urllib.parse.quote(pod_uid)}/"
    status, nic, wait = agent.exchange("DELETE", where, query=key, deadline=deadline)
    while status == 202 and isinstance(nic, dict):
        wait = _poll_wait(nic, wait)
        if time.monotonic() + wait >= deadline:
            raise CniError(
                TRY_AGAIN_LATER,
                f"the NIC's detach is still queued on this node's VM (place "
                f"{nic.get('queue_position')}) after {agent.timeout:.0f} s",
            )
        time.sleep(wait)
        status, nic, wait = agent.exchange("GET", where, query=key, deadline=deadline)
    if status == 200 and isinstance(nic, dict):
        retryable = nic.get("failure_code") in RETRYABLE_FAILURES
        raise CniError(
            TRY_AGAIN_LATER if retryable else AGENT_REFUSED,
            f"agent API: {nic.get('failure') or 'the detach failed'}",
        )


def _expected(prev: Mapping[str, Any], ifname: str, netns: str) -> tuple[str, set[str]]:
    """Our interface's MAC and addresses in prevResult (a later plugin may have changed
    them, as the spec allows)."""
    for index, item in enumerate(prev.get("interfaces", [])):
        if item.get("name") == ifname and item.get("sandbox") in (None, "", netns):
            addresses = {
                str(ip.get("address", ""))
                for ip in prev.get("ips", [])
                if ip.get("interface") == index
            }
            return str(item.get("mac", "")).lower(), addresses
    raise CniError(CHECK_FAILED, f"prevResult has no interface {ifname} in {netns}")


def cmd_check(config: dict[str, Any], environ: Mapping[str, str]) -> None:
    from pyroute2 import NetNS

    netns = _netns_path(_env(environ, "CNI_NETNS"))
    key = _attachment(environ)
    ifname = key["ifname"]
    pod = _pod(environ)
    if "prevResult" not in config:
        raise CniError(INVALID_CONFIG, "CHECK needs prevResult, the result of the ADD")
    mac, addresses = _expected(_prev_result(config), ifname, netns)
    node = NodeConfig(environ)
    nic = Agent(config, node).call("GET", f"nics/{urllib.parse.quote(pod['pod_uid'])}/", query=key)
    if not isinstance(nic, dict) or nic.get("state") != "attached":
        raise CniError(
            CHECK_FAILED,
            f"the agent API has no attached NIC for container {key['container_id']} and "
            f"{ifname} of pod {pod['pod_uid']}",
        )
    if f"{nic['address']}/{nic['prefix']}" not in addresses:
        raise CniError(
            CHECK_FAILED,
            f"the NIC has the address {nic['address']}/{nic['prefix']}, prevResult gives "
            f"{ifname} {', '.join(sorted(addresses)) or 'none'}",
        )
    if not os.path.exists(netns):
        raise CniError(CONTAINER_UNKNOWN, f"the network namespace {netns} does not exist")
    with NetNS(netns) as ns:
        found = ns.link_lookup(ifname=ifname)
        if not found:
            raise CniError(CHECK_FAILED, f"the pod has no interface {ifname}")
        present_mac = _link_mac(ns, found[0])
        present = {
            f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}"
            for family in (2, 10)
            for a in ns.get_addr(index=found[0], family=family)
        }
    if mac and present_mac != mac:
        raise CniError(CHECK_FAILED, f"{ifname} has MAC {present_mac}, prevResult says {mac}")
    missing = sorted(addresses - present)
    if missing:
        raise CniError(CHECK_FAILED, f"{ifname} lacks the address {', '.join(missing)}")


def _network_name(config: Mapping[str, Any]) -> str:
    name = config.get("name")
    if not isinstance(name, str) or not name:
        raise CniError(INVALID_CONFIG, "the network configuration has no name")
    return name[:253]


def _valid_attachments(config: Mapping[str, Any]) -> list[dict[str, str]]:
    # `cni.dev/attachments` is the name an early text of the 1.1 spec used.
    given = config.get("cni.dev/valid-attachments", config.get("cni.dev/attachments"))
    if not isinstance(given, list):
        raise CniError(INVALID_CONFIG, "GC needs cni.dev/valid-attachments, a list")
    valid = []
    for item in given:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("containerID"), str)
            and isinstance(item.get("ifname"), str)
        ):
            raise CniError(
                DECODE_FAILURE,
                "cni.dev/valid-attachments holds an entry without containerID and ifname",
            )
        valid.append({"container_id": item["containerID"], "ifname": item["ifname"]})
    return valid


def cmd_gc(config: dict[str, Any], environ: Mapping[str, str]) -> None:
    valid = _valid_attachments(config)
    node = NodeConfig(environ)
    answer = Agent(config, node).call(
        "POST",
        "gc/",
        {
            "node_name": node.node_name,
            "cni_network": _network_name(config),
            "valid_attachments": valid,
        },
    )
    errors = answer.get("failed") if isinstance(answer, dict) else None
    if errors:
        raise CniError(
            TRY_AGAIN_LATER,
            f"{len(errors)} NIC(s) could not be released now (the reclaimer tries again)",
            "; ".join(str(error) for error in errors)[:1000],
        )


def cmd_status(config: dict[str, Any], environ: Mapping[str, str]) -> None:
    """Ready when the installer's files are in place; the agent API is not called (a
    runtime asks often, and an agent API away for a moment stops no running pod)."""
    try:
        NodeConfig(environ)
    except CniError as exc:
        raise CniError(NOT_AVAILABLE, f"the plugin cannot serve an ADD: {exc.msg}") from None


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
            if _older_than_1(version) or version == "1.0.0":
                raise CniError(
                    INCOMPATIBLE_VERSION, f"{command} is CNI 1.1.0; the configuration is {version}"
                )
            (cmd_gc if command == "GC" else cmd_status)(config, environ)
            return 0, None
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
