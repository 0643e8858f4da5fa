"""WhiteskyClient: typed calls to the whitesky VCO API (`/api/1`) for one customer account.

All outbound HTTP goes through `WhiteskyClient._send`, one `requests.Session`, with a
(connect, read) timeout on every call. The session trusts nothing of the environment: no
HTTP(S)_PROXY or ALL_PROXY (a proxy there would see every request, and of a plain-http
origin the JWT itself), no .netrc, no REQUESTS_CA_BUNDLE. A proxy is used only when the
caller names one (`proxy_url`), the CA bundle only when given (`ca_bundle`). Every call
is one `Operation` of `operations.py`; failures come out as the errors of `errors.py`.

The credential is sent only to the hosts of `allowed_hosts` (see `hosts.py`), and no
redirect is followed: a 3xx is an error naming its status and the host it points to. What a
server answered reaches an error message only as whitesky's own JSON `{"message"}`, short
and on one line; any other body (an HTML page of a proxy, a portal) is not shown.

Retries (run by tenacity in `_call`): a call marked `repeatable` (reads; start, stop,
deletes, detaches) is tried up to `RetryPolicy.attempts` times on a retryable failure, with
exponential backoff and jitter, or the server's Retry-After (capped). Any other write is sent
once: when its answer is lost the caller gets `ResponseLost` and must look before trying
again. Independently of that, a 401 leads to one token refresh and one more try, for every
call (a 401 means nothing was done).

A client made with a `deadline` (a `monotonic` time: a pass's end) makes every call end by
then: each try waits at most the time left, none is tried again past it, and a call with
no time left is not sent (`DeadlinePassed`). A whitesky that answers slowly so ends the
pass with typed errors, before the task's time limit stops it with nothing recorded.
"""

from __future__ import annotations

import dataclasses
import email.utils
import http
import logging
import random
import re
import time
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import requests
import tenacity
import urllib3.exceptions

from . import operations as ops
from .auth import REFRESH_PATH, JwtCredential, token_from_refresh_body
from .errors import (
    BadRequest,
    CapacityExhausted,
    Conflict,
    DeadlinePassed,
    Forbidden,
    HostNotAllowed,
    IncompleteListing,
    NotFound,
    RateLimited,
    ResponseLost,
    Unauthorized,
    Unavailable,
    UnexpectedResponse,
    WhiteskyError,
    one_line,
)
from .hosts import AllowedHosts
from .operations import Operation
from .retry import RetryPolicy
from .types import (
    Cloudspace,
    Consumption,
    CurrentUser,
    CustomerLocation,
    ExternalNetwork,
    GpuProfile,
    Image,
    Listing,
    Location,
    Vgpu,
    Vm,
    VmNic,
    as_list,
    as_object,
    parse_cloudspace,
    parse_consumption,
    parse_current_user,
    parse_customer_locations,
    parse_external_network,
    parse_gpu_profile,
    parse_image,
    parse_location,
    parse_vgpu,
    parse_vm,
    parse_vm_nic,
    result_list,
    split_ip,
)

logger = logging.getLogger(__name__)

R = TypeVar("R")
Timeout = tuple[float, float]
QueryValue = str | int | float | bool | list[int] | list[str] | None

DEFAULT_TIMEOUT: Timeout = (5.0, 30.0)
DEFAULT_LONG_TIMEOUT: Timeout = (5.0, 300.0)
DEFAULT_PAGE_SIZE = 500

_RESERVES = frozenset({ops.RESERVE_VGPU.operation_id, ops.RESERVE_AND_ATTACH_VGPU.operation_id})
_SERVER_MESSAGE_LIMIT = 200
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9.+-]{1,40}/[A-Za-z0-9.+-]{1,60}")


def new_nic(
    after: list[VmNic],
    *,
    before: Collection[str],
    owned: Collection[str] = (),
    network_id: int | None = None,
    ip: str | None = None,
) -> VmNic | None:
    """The NIC an attach made: the one NIC of the listing `after` whose MAC the listing
    `before` did not hold and nobody else owns (`owned`), on `network_id` (and with `ip`)
    when given; None: the attach made none. Two or more cannot be told apart
    (UnexpectedResponse): attaches to one VM must be serialised. The one place that
    decides which NIC is new."""
    seen = {mac.lower() for mac in before} | {mac.lower() for mac in owned}
    new = [
        nic
        for nic in after
        if nic.mac.lower() not in seen
        and (network_id is None or nic.network_id == network_id)
        and (ip is None or nic.ip == ip)
    ]
    if len(new) > 1:
        raise UnexpectedResponse(
            f"{len(new)} new NICs after one attach; attaches to a VM must be serialised",
            operation=ops.ATTACH_EXTERNAL_NIC.operation_id,
        )
    return new[0] if new else None


class WhiteskyClient:
    """One customer account on one VCO.

    `api_url` is the API base, e.g. `https://cloud.example.com/api/1`; `iam_url` the IAM host
    that refreshes the JWT (None: the token is used as is until it fails). `on_answer`
    hears of every attempt: the operation id and the HTTP status, or "error" (no answer).
    A call to a URL that `allowed_hosts` refuses fails with `HostNotAllowed`, and sends
    nothing.
    """

    def __init__(
        self,
        *,
        api_url: str,
        customer_id: str,
        token: str,
        allowed_hosts: AllowedHosts,
        iam_url: str | None = None,
        on_token_refreshed: Callable[[str], None] | None = None,
        timeout: Timeout = DEFAULT_TIMEOUT,
        long_timeout: Timeout = DEFAULT_LONG_TIMEOUT,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        page_size: int = DEFAULT_PAGE_SIZE,
        refresh_margin: float = 60.0,
        session: requests.Session | None = None,
        on_answer: Callable[[str, str], None] | None = None,
        proxy_url: str | None = None,
        ca_bundle: str | None = None,
        deadline: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1 (0 would ask for everything at once)")
        self.api_url = api_url.rstrip("/")
        self.customer_id = customer_id
        self.iam_url = iam_url.rstrip("/") if iam_url else None
        self.allowed_hosts = allowed_hosts
        self.timeout = timeout
        self.long_timeout = long_timeout
        self.retry = retry or RetryPolicy()
        self.page_size = page_size
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._credential = JwtCredential(
            token, on_refreshed=on_token_refreshed, refresh_margin=refresh_margin, clock=clock
        )
        self._session = session or requests.Session()
        self._session.trust_env = False
        self._session.proxies = {}
        self._proxies = {"http": proxy_url, "https": proxy_url} if proxy_url else {}
        self._verify: bool | str = ca_bundle or True
        self._on_answer = on_answer or (lambda operation, status: None)
        self.deadline = deadline
        self._monotonic = monotonic

    @property
    def outcome_window(self) -> float:
        """Seconds from sending a write to the moment its outcome is settled: by then it
        has landed, or it never will (we stopped waiting for its answer). Only a listing
        begun after that can say a lost create or reserve did not happen."""
        return sum(self.long_timeout)

    def _time_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - self._monotonic()

    def _timeout_by_deadline(self, timeout: Timeout, operation: str) -> Timeout:
        """The call's timeout, cut to the time left before the deadline."""
        left = self._time_left()
        if left is None:
            return timeout
        if left <= 0:
            raise DeadlinePassed("the pass's time is up: not sent", operation=operation)
        return (min(timeout[0], left), min(timeout[1], left))

    def __repr__(self) -> str:
        return f"WhiteskyClient(api_url={self.api_url!r}, customer_id={self.customer_id!r})"

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> WhiteskyClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def token_expires_at(self) -> float | None:
        return self._credential.expires_at

    # --- account and locations ------------------------------------------------------------

    def current_user(self) -> CurrentUser:
        payload = self._call(ops.CURRENT_USER)
        return self._parse(ops.CURRENT_USER, parse_current_user, payload)

    def list_locations(self) -> list[Location]:
        payload = self._call(ops.LIST_LOCATIONS)
        return self._parse(ops.LIST_LOCATIONS, _listing_of(parse_location), payload)

    def list_customer_locations(self) -> list[CustomerLocation]:
        payload = self._call(ops.LIST_CUSTOMER_LOCATIONS)
        return self._parse(ops.LIST_CUSTOMER_LOCATIONS, parse_customer_locations, payload)

    # --- cloudspaces ----------------------------------------------------------------------

    def list_cloudspaces(
        self, *, locations: list[str] | None = None, include_deleted: bool = False
    ) -> list[Cloudspace]:
        payload = self._call(
            ops.LIST_CLOUDSPACES,
            query={"locations": locations or None, "include_deleted": include_deleted},
        )
        return self._parse(ops.LIST_CLOUDSPACES, _listing_of(parse_cloudspace), payload)

    def get_cloudspace(self, *, cloudspace_id: str) -> Cloudspace:
        payload = self._call(ops.GET_CLOUDSPACE, path={"cloudspace_id": cloudspace_id})
        return self._parse(ops.GET_CLOUDSPACE, parse_cloudspace, payload)

    def create_cloudspace(
        self,
        *,
        name: str,
        location: str,
        private_network: str | None = None,
        external_network_id: int | None = None,
        parent_cloudspace_id: str | None = None,
        private: bool = False,
        local_domain: str | None = None,
    ) -> str:
        """Creates a cloudspace and answers its id. Sent once (see ResponseLost)."""
        firewall: dict[str, Any] = {"private": private}
        if external_network_id is not None:
            firewall["external_network_id"] = external_network_id
        if parent_cloudspace_id is not None:
            firewall["parent_cloudspace_id"] = parent_cloudspace_id
        body: dict[str, Any] = {"name": name, "location": location, "firewall": firewall}
        if private_network is not None:
            body["private_network"] = private_network
        if local_domain is not None:
            body["local_domain"] = local_domain
        payload = self._call(ops.CREATE_CLOUDSPACE, body=body)
        return self._parse(ops.CREATE_CLOUDSPACE, _id_field("cloudspace_id"), payload)

    def delete_cloudspace(self, *, cloudspace_id: str, permanently: bool = False) -> None:
        self._call(
            ops.DELETE_CLOUDSPACE,
            path={"cloudspace_id": cloudspace_id},
            query={"permanently": permanently},
        )

    # --- virtual machines -----------------------------------------------------------------

    def list_vms(self, *, cloudspace_id: str, include_deleted: bool = False) -> list[Vm]:
        payload = self._call(
            ops.LIST_VMS,
            path={"cloudspace_id": cloudspace_id},
            query={"include_deleted": include_deleted},
        )
        vms = self._parse(ops.LIST_VMS, _listing_of(parse_vm), payload)
        return [dataclasses.replace(vm, cloudspace_id=cloudspace_id) for vm in vms]

    def get_vm(self, *, cloudspace_id: str, vm_id: int) -> Vm:
        payload = self._call(ops.GET_VM, path={"cloudspace_id": cloudspace_id, "vm_id": vm_id})
        return self._parse(ops.GET_VM, parse_vm, payload)

    def create_vm(
        self,
        *,
        cloudspace_id: str,
        name: str,
        description: str,
        vcpus: int,
        memory_mib: int,
        image_id: int,
        disk_size_gib: int,
        start: bool = False,
        user_data: str | None = None,
        hostname: str | None = None,
        private_ip: str | None = None,
        data_disks_gib: list[int] | None = None,
        boot_type: str | None = None,
        enable_vm_agent: bool | None = None,
        gpu_id: str | None = None,
        vgpu_name: str | None = None,
    ) -> int:
        """Creates a VM (halted unless `start`) and answers its id. Sent once: a VM name is
        the caller's idempotency key (look for it with `list_vms` after `ResponseLost`).

        `gpu_id` with `vgpu_name` reserves and attaches a vGPU in the same call.
        """
        if (gpu_id is None) != (vgpu_name is None):
            raise ValueError("gpu_id and vgpu_name go together")
        body = {"gpu_id": gpu_id, "vgpu_name": vgpu_name} if gpu_id is not None else None
        payload = self._call(
            ops.CREATE_VM,
            path={"cloudspace_id": cloudspace_id},
            query={
                "name": name,
                "description": description,
                "vcpus": vcpus,
                "memory": memory_mib,
                "image_id": image_id,
                "disk_size": disk_size_gib,
                "start_vm": start,
                "user_data": user_data,
                "hostname": hostname,
                "private_ip": private_ip,
                "data_disks": data_disks_gib or None,
                "boot_type": boot_type,
                "enable_vm_agent": enable_vm_agent,
            },
            body=body,
        )
        return self._parse(ops.CREATE_VM, _int_field("vm_id"), payload)

    def delete_vm(
        self,
        *,
        cloudspace_id: str,
        vm_id: int,
        permanently: bool = False,
        detach_gpu: bool = False,
    ) -> None:
        """Deletes a VM: to the recycle bin unless `permanently`. A VM holding vGPUs must be
        halted, and `detach_gpu` leaves its reservations alive (and billed): release them."""
        self._call(
            ops.DELETE_VM,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id},
            query={"permanently": permanently, "detach_gpu": detach_gpu},
        )

    def start_vm(self, *, cloudspace_id: str, vm_id: int) -> None:
        self._call(ops.START_VM, path={"cloudspace_id": cloudspace_id, "vm_id": vm_id})

    def stop_vm(self, *, cloudspace_id: str, vm_id: int, force: bool = False) -> None:
        self._call(
            ops.STOP_VM,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id},
            query={"force": force},
        )

    # --- external NICs --------------------------------------------------------------------

    def list_vm_nics(self, *, cloudspace_id: str, vm_id: int) -> list[VmNic]:
        payload = self._call(
            ops.LIST_VM_NICS, path={"cloudspace_id": cloudspace_id, "vm_id": vm_id}
        )
        return self._parse(ops.LIST_VM_NICS, _listing_of(parse_vm_nic), payload)

    def get_vm_nic(self, *, cloudspace_id: str, vm_id: int, ip: str) -> VmNic:
        payload = self._call(
            ops.GET_VM_NIC,
            path={
                "cloudspace_id": cloudspace_id,
                "vm_id": vm_id,
                "external_ip_address": split_ip(ip)[0],
            },
        )
        return self._parse(ops.GET_VM_NIC, parse_vm_nic, payload)

    def send_external_nic_attach(
        self,
        *,
        cloudspace_id: str,
        vm_id: int,
        external_network_id: int,
        ip: str | None = None,
        model: str | None = None,
        network_type: str = "external",
        external_cloudspace_id: str | None = None,
    ) -> None:
        """Sends the attach, once; its answer says nothing of the NIC. A caller that keeps the
        listing from before finds the NIC with `new_nic` in the listing after (the SR-IOV
        agent, which also holds the VM's attaches one at a time and keeps what a lost
        answer may have made: `sriov.agent`)."""
        self._call(
            ops.ATTACH_EXTERNAL_NIC,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id},
            query={
                "external_network_id": external_network_id,
                "external_network_ip": split_ip(ip)[0] if ip else None,
                "model": model,
                "external_network_type": network_type,
                "external_cloudspace_id": external_cloudspace_id,
            },
        )

    def detach_external_nic(
        self,
        *,
        cloudspace_id: str,
        vm_id: int,
        ip: str,
        external_network_id: int,
        network_type: str = "external",
        external_cloudspace_id: str | None = None,
    ) -> None:
        """Detaches the VM's NIC with address `ip` (a `/prefix` is ignored)."""
        self._call(
            ops.DETACH_EXTERNAL_NIC,
            path={
                "cloudspace_id": cloudspace_id,
                "vm_id": vm_id,
                "external_ip_address": split_ip(ip)[0],
            },
            query={
                "external_network_id": external_network_id,
                "external_network_type": network_type,
                "external_cloudspace_id": external_cloudspace_id,
            },
        )

    def list_external_networks(self, *, location: str) -> list[ExternalNetwork]:
        payload = self._call(ops.LIST_EXTERNAL_NETWORKS, path={"location": location})
        return self._parse(ops.LIST_EXTERNAL_NETWORKS, _listing_of(parse_external_network), payload)

    def get_external_network(self, *, location: str, external_network_id: int) -> ExternalNetwork:
        payload = self._call(
            ops.GET_EXTERNAL_NETWORK,
            path={"location": location, "external_network_id": external_network_id},
        )
        return self._parse(ops.GET_EXTERNAL_NETWORK, parse_external_network, payload)

    def list_free_ips(self, *, location: str, external_network_id: int) -> list[str]:
        payload = self._call(
            ops.LIST_FREE_IPS,
            path={"location": location, "external_network_id": external_network_id},
        )

        def read(payload: Any) -> list[str]:
            addresses = as_list(as_object(payload, "ip addresses").get("ip_addresses"), "ips")
            return [split_ip(str(address))[0] for address in addresses]

        return self._parse(ops.LIST_FREE_IPS, read, payload)

    # --- images ---------------------------------------------------------------------------

    def list_images(self, *, location: str) -> list[Image]:
        payload = self._call(ops.LIST_IMAGES, path={"location": location})
        return self._parse(ops.LIST_IMAGES, _listing_of(parse_image), payload)

    # --- GPUs -----------------------------------------------------------------------------

    def list_gpu_profiles(self, *, location: str) -> list[GpuProfile]:
        payload = self._call(ops.LIST_GPU_PROFILES, path={"location": location})
        return self._parse(ops.LIST_GPU_PROFILES, _listing_of(parse_gpu_profile), payload)

    def reserve_vgpu(self, *, location: str, gpu_id: str, name: str) -> str:
        """Reserves a vGPU instance on card `gpu_id` and answers its id. Billed from now on.

        Sent once. On `ResponseLost`, look for `name` in `list_vgpus` before reserving again.
        A full card raises `CapacityExhausted`.
        """
        payload = self._call(
            ops.RESERVE_VGPU,
            path={"location": location, "gpu_id": gpu_id},
            body={"vgpu_name": name},
        )
        return self._parse(ops.RESERVE_VGPU, _id_field("vgpu_id"), payload)

    def reserve_and_attach_vgpu(
        self, *, cloudspace_id: str, vm_id: int, gpu_id: str, name: str
    ) -> str:
        """Reserves a vGPU on card `gpu_id` and attaches it to a (halted) VM in one call.
        Sent once; same rules as `reserve_vgpu`."""
        payload = self._call(
            ops.RESERVE_AND_ATTACH_VGPU,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id, "gpu_id": gpu_id},
            body={"vgpu_name": name},
        )
        return self._parse(ops.RESERVE_AND_ATTACH_VGPU, _id_field("vgpu_id"), payload)

    def attach_vgpu(self, *, cloudspace_id: str, vm_id: int, vgpu_id: str) -> None:
        self._call(
            ops.ATTACH_VGPU,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id, "vgpu_id": vgpu_id},
        )

    def detach_vgpu(self, *, cloudspace_id: str, vm_id: int, vgpu_id: str) -> None:
        """Detaches a vGPU from a (halted) VM. The reservation stays, and stays billed."""
        self._call(
            ops.DETACH_VGPU,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id, "vgpu_id": vgpu_id},
        )

    def list_vgpus(self, *, location: str, include_deleted: bool = False) -> Listing[Vgpu]:
        """Every vGPU reservation at `location`, all pages.

        Never raises for an API failure: a page that failed after retries, a count that does
        not add up, or a listing that moved between pages gives `complete=False` with the
        reason in `error`, and the items read so far.
        """
        items: dict[str, Vgpu] = {}
        expected: int | None = None
        start_after = 0
        while True:
            try:
                payload = self._call(
                    ops.LIST_VGPUS,
                    path={"location": location},
                    query={
                        "limit": self.page_size,
                        "start_after": start_after,
                        "include_deleted": include_deleted,
                    },
                )
                count, page = self._parse(ops.LIST_VGPUS, _vgpu_page, payload)
            except WhiteskyError as exc:
                logger.warning("whitesky: vGPU listing of %s incomplete: %s", location, exc)
                return Listing(tuple(items.values()), complete=False, error=exc)
            if expected is None:
                expected = count
            elif count != expected:
                return self._incomplete(
                    items, f"the listing changed between pages (count {expected}, then {count})"
                )
            for vgpu in page:
                if vgpu.vgpu_id in items:
                    return self._incomplete(
                        items, f"vGPU {vgpu.vgpu_id} listed twice: the listing moved"
                    )
                items[vgpu.vgpu_id] = vgpu
            start_after += len(page)
            if not page or start_after >= expected:
                break
        if len(items) != expected:
            return self._incomplete(
                items, f"collected {len(items)} vGPUs, pagination.count says {expected}"
            )
        return Listing(tuple(items.values()), complete=True)

    @staticmethod
    def _incomplete(items: dict[str, Vgpu], reason: str) -> Listing[Vgpu]:
        logger.warning("whitesky: vGPU listing incomplete: %s", reason)
        error = IncompleteListing(reason, operation=ops.LIST_VGPUS.operation_id)
        return Listing(tuple(items.values()), complete=False, error=error)

    def release_vgpu(
        self, *, location: str, vgpu_id: str, detach: bool = True, permanently: bool = True
    ) -> None:
        """Deletes a reservation. Only a permanent delete is sure to stop the charge."""
        self._call(
            ops.RELEASE_VGPU,
            path={"location": location, "vgpu_id": vgpu_id},
            query={"detach": detach, "permanently": permanently},
        )

    def restore_vgpu(self, *, location: str, vgpu_id: str) -> None:
        self._call(ops.RESTORE_VGPU, path={"location": location, "vgpu_id": vgpu_id})

    # --- billing --------------------------------------------------------------------------

    def location_consumption(
        self, *, location: str, start: int | datetime, end: int | datetime
    ) -> Consumption:
        payload = self._call(
            ops.LOCATION_CONSUMPTION,
            path={"location": location},
            query={"start": _epoch(start), "end": _epoch(end)},
        )
        return self._parse(ops.LOCATION_CONSUMPTION, parse_consumption, payload)

    # --- the request machinery ------------------------------------------------------------

    def _send(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        params: list[tuple[str, str]] | None,
        json_body: Any,
        timeout: Timeout,
        operation: str,
    ) -> requests.Response:
        """The one place where the client talks to the network: only to allowed hosts,
        never on to where a redirect points, and through a proxy only when one was named."""
        if refusal := self.allowed_hosts.refusal(url):
            raise HostNotAllowed(f"credential not sent: {refusal}", operation=operation)
        self._session.trust_env = False  # whatever a caller did to the session since
        return self._session.request(
            method,
            url,
            headers=dict(headers),
            params=params,
            json=json_body,
            timeout=timeout,
            allow_redirects=False,
            proxies=self._proxies,
            verify=self._verify,
        )

    def _call(
        self,
        op: Operation,
        *,
        path: Mapping[str, str | int] | None = None,
        query: Mapping[str, QueryValue] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Any:
        url = self._url(op, dict(path or {}))
        params = _query_params(op, query or {})
        if body is not None:
            _check_body(op, body, "")
        timeout = self.long_timeout if op.long_running else self.timeout

        refreshed_after_401 = False
        maybe_acted = False
        refresh_failed = False

        def attempt() -> Any:
            """One try, with its one token refresh after a 401 (a 401 means nothing was
            done, so the try after it is not a retry)."""
            nonlocal refreshed_after_401, maybe_acted, refresh_failed
            while True:
                started = time.monotonic()
                try:
                    token = self._bearer()
                    response = self._send(
                        op.method,
                        url,
                        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
                        params=params,
                        json_body=body,
                        timeout=self._timeout_by_deadline(timeout, op.operation_id),
                        operation=op.operation_id,
                    )
                except requests.RequestException as exc:
                    self._on_answer(op.operation_id, "error")
                    error, sent = self._transport_error(op, exc)
                    maybe_acted = maybe_acted or sent
                    raise error from None
                # A WhiteskyError (a host not allowed, or the refresh before the call) goes
                # on as it is.
                self._on_answer(op.operation_id, str(response.status_code))
                logger.debug(
                    "whitesky %s %s -> %s (%.3fs)",
                    op.method,
                    op.operation_id,
                    response.status_code,
                    time.monotonic() - started,
                )
                if response.status_code == 401 and not refreshed_after_401 and self.iam_url:
                    refreshed_after_401 = True
                    try:
                        self._refresh(used=token)
                    except WhiteskyError:
                        refresh_failed = True
                        raise
                    continue
                if 200 <= response.status_code < 300:
                    return self._json(op, response)
                if response.status_code == 404 and maybe_acted and op.gone_means_done:
                    logger.info("whitesky: %s repeated after a lost answer: gone", op.operation_id)
                    return None
                maybe_acted = maybe_acted or (
                    response.status_code >= 500 and response.status_code != 503
                )
                raise self._http_error(op, response)

        def may_repeat(exc: BaseException) -> bool:
            # Only a call that is safe to repeat is tried again, and only on a failure that
            # says trying again can help: a write whose answer was lost is never repeated
            # here. The token was refused and no other came: that ends the call too.
            # Nor past the deadline: the pass has no time left for another try.
            left = self._time_left()
            return (
                op.repeatable
                and isinstance(exc, WhiteskyError)
                and exc.retryable
                and not refresh_failed
                and (left is None or left > 0)
            )

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(may_repeat),
            stop=tenacity.stop_after_attempt(self.retry.attempts),
            wait=self._backoff,
            sleep=self._sleep,
            before_sleep=lambda state: _log_retry(op, state),
            reraise=True,
        )
        return retrying(attempt)

    def _backoff(self, state: tenacity.RetryCallState) -> float:
        """Seconds before the next try: the server's Retry-After when it sent one, else
        the policy's backoff with jitter from the client's own randomness; never past the
        deadline."""
        error = state.outcome.exception() if state.outcome else None
        retry_after = error.retry_after if isinstance(error, RateLimited | Unavailable) else None
        delay = self.retry.delay(state.attempt_number - 1, retry_after=retry_after, rng=self._rng)
        left = self._time_left()
        return delay if left is None else max(0.0, min(delay, left))

    def _url(self, op: Operation, path: dict[str, str | int]) -> str:
        if "customer_id" in op.path_params:
            path["customer_id"] = self.customer_id
        if set(path) != op.path_params:
            raise ValueError(
                f"{op.operation_id}: path parameters {sorted(path)} != {sorted(op.path_params)}"
            )
        quoted = {name: quote(str(value), safe="") for name, value in path.items()}
        return self.api_url + op.path.format(**quoted)

    def _bearer(self) -> str:
        credential = self._credential
        if self.iam_url and credential.needs_refresh():
            try:
                self._refresh(used=credential.token)
            except WhiteskyError as exc:
                if credential.expired():
                    raise
                logger.warning("whitesky: early token refresh failed, token still valid: %s", exc)
        return credential.token

    def _refresh(self, *, used: str) -> None:
        """Swaps the JWT for a new one from the IAM host. `used` is the token the caller
        sent; if another thread already replaced it, there is nothing to do."""
        assert self.iam_url is not None
        credential = self._credential
        with credential.lock:
            if credential.token != used:
                return
            try:
                response = self._send(
                    "GET",
                    self.iam_url + REFRESH_PATH,
                    headers={"Authorization": f"Bearer {used}"},
                    params=None,
                    json_body=None,
                    timeout=self._timeout_by_deadline(self.timeout, "refreshJWT"),
                    operation="refreshJWT",
                )
            except requests.RequestException as exc:
                raise Unavailable(
                    f"token refresh got no answer ({type(exc).__name__})", operation="refreshJWT"
                ) from None
            if response.status_code != 200:
                why = (
                    _redirect_message(response)
                    if 300 <= response.status_code < 400
                    else self._server_message(response)
                )
                raise Unauthorized(
                    f"token refresh refused: {why}",
                    status=response.status_code,
                    operation="refreshJWT",
                    retryable=response.status_code >= 500 or response.status_code == 429,
                )
            credential.replace(token_from_refresh_body(response.text))
            logger.info("whitesky: token refreshed for customer %s", self.customer_id)

    def _json(self, op: Operation, response: requests.Response) -> Any:
        if not response.content or not response.content.strip():
            return None
        try:
            return response.json()
        except ValueError:
            raise UnexpectedResponse(
                f"answer is not JSON ({_body_kind(response)} answer of "
                f"{len(response.content)} bytes, not shown)",
                status=response.status_code,
                operation=op.operation_id,
            ) from None

    def _parse(self, op: Operation, read: Callable[[Any], R], payload: Any) -> R:
        try:
            return read(payload)
        except UnexpectedResponse as exc:
            exc.operation = exc.operation or op.operation_id
            raise

    def _server_message(self, response: requests.Response) -> str:
        """whitesky's `{"message"}` (Flask-RESTX errors), short and on one line; for any
        other answer only the status's standard phrase: a foreign body is never shown."""
        try:
            data = response.json()
        except ValueError:
            data = None
        message = data.get("message") if isinstance(data, dict) else None
        if isinstance(message, str) and message.strip():
            return one_line(self._credential.redact(message), _SERVER_MESSAGE_LIMIT)
        try:
            phrase = http.HTTPStatus(response.status_code).phrase
        except ValueError:
            phrase = "Unknown status"
        return f"{phrase} (no whitesky message; {_body_kind(response)} answer not shown)"

    def _http_error(self, op: Operation, response: requests.Response) -> WhiteskyError:
        status = response.status_code
        where = op.operation_id
        if 300 <= status < 400:
            return WhiteskyError(_redirect_message(response), status=status, operation=where)
        message = self._server_message(response)
        if status in (400, 422):
            return BadRequest(message, status=status, operation=where)
        if status == 401:
            return Unauthorized(message, status=status, operation=where)
        if status == 403:
            return Forbidden(message, status=status, operation=where)
        if status == 404:
            return NotFound(message, status=status, operation=where)
        if status == 409:
            if op.operation_id in _RESERVES and _means_no_capacity(message):
                return CapacityExhausted(message, status=status, operation=where)
            return Conflict(message, status=status, operation=where)
        if status == 429:
            retry_after = _retry_after(response.headers.get("Retry-After"))
            return RateLimited(message, status=status, operation=where, retry_after=retry_after)
        if status >= 500:
            if not op.repeatable and status != 503:
                return ResponseLost(
                    f"outcome unknown, look before repeating: {message}",
                    status=status,
                    operation=where,
                )
            retry_after = _retry_after(response.headers.get("Retry-After"))
            return Unavailable(message, status=status, operation=where, retry_after=retry_after)
        return WhiteskyError(message, status=status, operation=where, retryable=False)

    def _transport_error(
        self, op: Operation, exc: requests.RequestException
    ) -> tuple[WhiteskyError, bool]:
        """The error for a call that got no HTTP answer, and whether it may have arrived."""
        where = op.operation_id
        kind = type(exc).__name__
        if isinstance(exc, requests.exceptions.InvalidURL | requests.exceptions.MissingSchema):
            return WhiteskyError(f"bad URL ({kind})", operation=where, retryable=False), False
        if _never_sent(exc):
            return Unavailable(f"could not connect ({kind})", operation=where), False
        if op.repeatable:
            return Unavailable(f"no answer ({kind})", operation=where), True
        return (
            ResponseLost(
                f"no answer ({kind}): outcome unknown, look before repeating", operation=where
            ),
            True,
        )


# --- helpers that only the client needs -------------------------------------------------


def _redirect_message(response: requests.Response) -> str:
    """A 3xx named by where it points (the host only: a path or query may carry anything)."""
    location = response.headers.get("Location", "")
    try:
        parts = urlsplit(location)
        host = parts.hostname
        port = parts.port
    except ValueError:
        host, port = "an unreadable Location", None
    where = host or ("the same host" if location else "nowhere (no Location)")
    if host and ":" in host:
        where = f"[{host}]"
    if host and port is not None:
        where = f"{where}:{port}"
    return f"redirected to {one_line(where, 100)}; redirects are not followed"


def _body_kind(response: requests.Response) -> str:
    """The media type of an answer, when it reads as one (it is the server's text too)."""
    media_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if not media_type:
        return "an untyped"
    return media_type if _MEDIA_TYPE.fullmatch(media_type) else "an unreadably typed"


def _listing_of(parse: Callable[[Any], R]) -> Callable[[Any], list[R]]:
    """A reader of the `{"result": [...]}` envelope, each entry read by `parse`."""

    def read(payload: Any) -> list[R]:
        return [parse(entry) for entry in result_list(payload, "listing")]

    return read


def _id_field(key: str) -> Callable[[Any], str]:
    """A reader of `{key: id}` answers (ids as strings)."""

    def read(payload: Any) -> str:
        value = as_object(payload, key).get(key)
        if value is None or isinstance(value, bool) or str(value) == "":
            raise UnexpectedResponse(f"answer without {key}")
        return str(value)

    return read


def _int_field(key: str) -> Callable[[Any], int]:
    """A reader of `{key: integer id}` answers."""

    def read(payload: Any) -> int:
        value = as_object(payload, key).get(key)
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise UnexpectedResponse(f"answer without a usable {key}: {value!r}")
        try:
            return int(value)
        except ValueError:
            raise UnexpectedResponse(f"answer without a usable {key}: {value!r}") from None

    return read


def _vgpu_page(payload: Any) -> tuple[int, list[Vgpu]]:
    page = as_object(payload, "vGPU page")
    pagination = as_object(page.get("pagination"), "vGPU page pagination")
    count = pagination.get("count")
    if isinstance(count, bool) or not isinstance(count, int):
        raise UnexpectedResponse(f"vGPU page without a usable pagination.count: {count!r}")
    data = as_list(page.get("data"), "vGPU page data")
    return count, [parse_vgpu(entry) for entry in data]


def _query_params(op: Operation, query: Mapping[str, QueryValue]) -> list[tuple[str, str]] | None:
    unknown = set(query) - op.query
    if unknown:
        raise ValueError(f"{op.operation_id}: query parameters not declared: {sorted(unknown)}")
    params: list[tuple[str, str]] = []
    for name, value in query.items():
        if value is None:
            continue
        if isinstance(value, bool):
            params.append((name, "true" if value else "false"))
        elif isinstance(value, list):
            params.append((name, ",".join(str(item) for item in value)))
        else:
            params.append((name, str(value)))
    return params or None


def _check_body(op: Operation, body: Mapping[str, Any], prefix: str) -> None:
    for name, value in body.items():
        field = prefix + name
        if field in op.body:
            continue
        nested = any(declared.startswith(field + ".") for declared in op.body)
        if nested and isinstance(value, Mapping):
            _check_body(op, value, field + ".")
            continue
        raise ValueError(f"{op.operation_id}: body field not declared: {field}")


def _never_sent(exc: requests.RequestException) -> bool:
    """True when the connection was never made, so the server cannot have seen the call."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    if not isinstance(exc, requests.exceptions.ConnectionError):
        return False
    reason: Any = exc.args[0] if exc.args else None
    reason = getattr(reason, "reason", reason)  # urllib3's MaxRetryError wraps the cause
    return isinstance(reason, urllib3.exceptions.ConnectTimeoutError)  # incl. NewConnectionError


def _log_retry(op: Operation, state: tenacity.RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    delay = state.next_action.sleep if state.next_action else 0.0
    logger.warning(
        "whitesky: %s failed (%s); retry %d in %.2fs",
        op.operation_id,
        error,
        state.attempt_number,
        delay,
    )


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _means_no_capacity(message: str) -> bool:
    """A 409 on a reserve means the card is full, unless the message is about something else
    the description lets a reserve conflict on: the VM's state (reserve-and-attach to a running
    or deleted VM) or a name already taken."""
    lowered = message.lower()
    return not any(
        word in lowered for word in ("running", "halted", "stopped", "deleted", "already exists")
    )


def _epoch(value: int | datetime) -> int:
    return int(value.timestamp()) if isinstance(value, datetime) else int(value)
