"""The control API under ``/_sim/``: how tests and the demo steer the simulator.

No authentication, no faults, not in the call log. JSON in, JSON out; errors as
``{"message"}``. The table of calls is in docs/simulator-contract.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simulator.whitesky.errors import BadRequest, MethodNotAllowed, NotFound, SimError
from simulator.whitesky.switches import switches_updated
from simulator.whitesky.wire import Reply, Request
from simulator.whitesky.worldfile import WorldError

if TYPE_CHECKING:
    from simulator.whitesky.server import Simulator

ControlHandler = Callable[["Simulator", Any], object]


def _token(sim: Simulator, body: Any) -> object:
    """GET: the seeded user's token. POST `{"subject": name}`: a token of another holder
    (a second credential of the same customer, told apart in the call log)."""
    subject = None
    if body is not None:
        subject = body.get("subject") if isinstance(body, dict) else None
        if not isinstance(subject, str) or not subject.strip() or len(subject) > 100:
            raise BadRequest('body must be {"subject": a name of 1 to 100 characters}')
    token, expires_at = sim.issue_token(subject)
    return {
        "jwt": token,
        "customer_id": sim.world.tables.customer.customer_id,
        "expires_at": expires_at,
    }


def _reset(sim: Simulator, body: Any) -> object:
    if body is not None and not isinstance(body, dict):
        raise BadRequest("the reset body is a world (a JSON object), or empty")
    try:
        sim.reset(body or None)
    except WorldError as exc:
        raise BadRequest(str(exc)) from exc
    return {"customer_id": sim.world.tables.customer.customer_id}


def _add_fault(sim: Simulator, body: Any) -> object:
    known = sim.operations | {"refreshJWT"}
    fault = sim.faults.add(body, known)
    return {"id": fault.id}


def _list_faults(sim: Simulator, _body: Any) -> object:
    return {"faults": [fault.describe() for fault in sim.faults.faults]}


def _clear_faults(sim: Simulator, _body: Any) -> object:
    sim.faults.clear()
    return {"faults": []}


def _advance_clock(sim: Simulator, body: Any) -> object:
    seconds = body.get("advance") if isinstance(body, dict) else None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise BadRequest('body must be {"advance": seconds}, with seconds >= 0')
    now = sim.world.clock.advance(float(seconds))
    return {"now": now, "offset": sim.world.clock.offset}


def _get_clock(sim: Simulator, _body: Any) -> object:
    return {"now": sim.world.clock.now(), "offset": sim.world.clock.offset}


def _configure(sim: Simulator, body: Any) -> object:
    if not isinstance(body, dict) or set(body) - {"token_ttl", "switches"}:
        raise BadRequest('body must be {"token_ttl": int?, "switches": {name: bool}?}')
    ttl = body.get("token_ttl")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1):
        raise BadRequest("token_ttl must be a positive integer (seconds)")
    switches = switches_updated(sim.world.switches, body.get("switches", {}))
    sim.world.set_switches(switches)
    if ttl is not None:
        sim.token_ttl = ttl
    return _get_config(sim, None)


def _get_config(sim: Simulator, _body: Any) -> object:
    return {"token_ttl": sim.token_ttl, "switches": dict(sim.world.switches)}


def _state(sim: Simulator, _body: Any) -> object:
    state = sim.world.tables.to_dict()
    for card in state["cards"]:
        card["available_instances"] = card["instances_per_card"] - card["held"]
    state.update(
        now=sim.world.clock.now(),
        clock_offset=sim.world.clock.offset,
        switches=dict(sim.world.switches),
        token_ttl=sim.token_ttl,
        version=sim.world.version,
    )
    return state


def _calls(sim: Simulator, _body: Any) -> object:
    reads = sum(1 for call in sim.calls if call["method"] == "GET")
    return {"calls": list(sim.calls), "reads": reads, "writes": len(sim.calls) - reads}


def _clear_calls(sim: Simulator, _body: Any) -> object:
    sim.calls.clear()
    return {"calls": [], "reads": 0, "writes": 0}


def _seed(sim: Simulator, body: Any) -> object:
    """Bulk-create VMs and reservations in one call (benchmarks, big demos)."""
    if not isinstance(body, dict) or "cloudspace_id" not in body:
        raise BadRequest(
            'body must be {"cloudspace_id": str, "vms": int?, "vm_names": [str]?, '
            '"vm_gpus": int?, "running": bool?, "vgpus": int?, "gpu_id": str?, "prefix": str?}'
        )
    counts = {name: body.get(name, 0) for name in ("vms", "vgpus", "vm_gpus")}
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadRequest(f"{name} must be a non-negative integer")
    vm_names = body.get("vm_names")
    if vm_names is not None:
        if not isinstance(vm_names, list) or not all(
            isinstance(name, str) and name for name in vm_names
        ):
            raise BadRequest("vm_names must be a list of names")
        if counts["vms"]:
            raise BadRequest("vms and vm_names passed together")
    running = body.get("running", False)
    if not isinstance(running, bool):
        raise BadRequest("running must be true or false")
    return sim.world.seed(
        str(body["cloudspace_id"]),
        vms=counts["vms"],
        vgpus=counts["vgpus"],
        gpu_id=body.get("gpu_id"),
        prefix=str(body.get("prefix", "seed")),
        vm_names=vm_names,
        vm_gpus=counts["vm_gpus"],
        running=running,
    )


CONTROL_ROUTES: dict[str, dict[str, ControlHandler]] = {
    "/_sim/token": {"GET": _token, "POST": _token},
    "/_sim/reset": {"POST": _reset},
    "/_sim/faults": {"POST": _add_fault, "GET": _list_faults, "DELETE": _clear_faults},
    "/_sim/clock": {"POST": _advance_clock, "GET": _get_clock},
    "/_sim/config": {"POST": _configure, "GET": _get_config},
    "/_sim/state": {"GET": _state},
    "/_sim/calls": {"GET": _calls, "DELETE": _clear_calls},
    "/_sim/seed": {"POST": _seed},
}


def handle_control(sim: Simulator, request: Request) -> Reply:
    try:
        methods = CONTROL_ROUTES.get(request.path.rstrip("/"))
        if methods is None:
            raise NotFound(f"No such control path: {request.path}")
        handler = methods.get(request.method)
        if handler is None:
            raise MethodNotAllowed("Method not allowed", allow=sorted(methods))
        body: Any = None
        if request.body.strip():
            try:
                body = json.loads(request.body)
            except ValueError as exc:
                raise BadRequest(f"invalid JSON body: {exc}") from exc
        with sim.lock:
            try:
                payload = handler(sim, body)
            finally:
                sim.persist()
        return Reply.json(200, payload)
    except SimError as exc:
        return Reply.error(exc)
