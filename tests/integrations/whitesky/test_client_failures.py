"""How the client fails, against the simulator's injected faults over real HTTP: what is
retried, what is never repeated, what a lost answer means, and how the token is renewed."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests

from capvco_web.integrations.whitesky import (
    DeadlinePassed,
    IncompleteListing,
    RateLimited,
    ResponseLost,
    Unauthorized,
    Unavailable,
    WhiteskyClient,
)
from capvco_web.integrations.whitesky.auth import jwt_expiry
from tests.integrations.whitesky.conftest import READ_TIMEOUT
from tests.integrations.whitesky.world import (
    CLOUDSPACE,
    LOCATION,
    NETWORK,
    card,
    new_vm,
    operations_called,
)
from tests.whitesky_sim import WhiteskySimulator

MakeClient = Callable[..., WhiteskyClient]
SHORT_READ = 0.3  # seconds; latency faults exceed it


def reserve_on_every_free_instance(client: WhiteskyClient) -> list[str]:
    profiles = client.list_gpu_profiles(location=LOCATION)
    gpu_ids = [p.id for p in profiles for _ in range(p.available_instances)]
    return [
        client.reserve_vgpu(location=LOCATION, gpu_id=gpu_id, name=f"g{n}")
        for n, gpu_id in enumerate(gpu_ids)
    ]


# --- reads: retried ---------------------------------------------------------------------


def test_read_is_retried_after_a_5xx_with_backoff(
    client: WhiteskyClient, sim: WhiteskySimulator, sleeps: list[float]
) -> None:
    sim.fault(operation="listAvailableGPUProfiles", status=500, times=2)
    assert len(client.list_gpu_profiles(location=LOCATION)) == 3
    assert len(operations_called(sim, "listAvailableGPUProfiles")) == 3
    assert len(sleeps) == 2
    assert all(0 < delay <= 0.05 for delay in sleeps)


def test_read_failing_every_attempt_is_unavailable(
    client: WhiteskyClient, sim: WhiteskySimulator, sleeps: list[float]
) -> None:
    sim.fault(operation="listAvailableGPUProfiles", status=502)
    with pytest.raises(Unavailable) as caught:
        client.list_gpu_profiles(location=LOCATION)
    assert caught.value.status == 502
    assert caught.value.retryable
    assert "Simulated fault" in caught.value.message  # the server's {"message"} is kept
    assert len(operations_called(sim, "listAvailableGPUProfiles")) == 3
    assert len(sleeps) == 2


def test_retry_after_of_a_429_is_honoured(
    client: WhiteskyClient, sim: WhiteskySimulator, sleeps: list[float]
) -> None:
    sim.fault(operation="listLocations", status=429, retry_after=7, times=1)
    assert client.list_locations()
    assert sleeps == [7.0]


def test_retry_after_of_a_503_is_honoured(
    client: WhiteskyClient, sim: WhiteskySimulator, sleeps: list[float]
) -> None:
    sim.fault(operation="listLocations", status=503, retry_after=2, times=1)
    assert client.list_locations()
    assert sleeps == [2.0]


def test_retry_after_of_a_429_is_capped(
    client: WhiteskyClient, sim: WhiteskySimulator, sleeps: list[float]
) -> None:
    sim.fault(operation="listLocations", status=429, retry_after=3600, times=1)
    assert client.list_locations()
    assert sleeps == [30.0]


def test_429_on_every_attempt_is_rate_limited_with_retry_after(
    client: WhiteskyClient, sim: WhiteskySimulator
) -> None:
    sim.fault(operation="listLocations", status=429, retry_after=5)
    with pytest.raises(RateLimited) as caught:
        client.list_locations()
    assert caught.value.retry_after == 5.0


def test_read_timing_out_is_retried(
    make_client: MakeClient, sim: WhiteskySimulator, sleeps: list[float]
) -> None:
    client = make_client(timeout=(2.0, SHORT_READ))
    sim.fault(operation="listAvailableGPUProfiles", latency_ms=800, times=1)
    assert len(client.list_gpu_profiles(location=LOCATION)) == 3
    assert len(sleeps) == 1


def test_read_timing_out_on_every_attempt_is_unavailable(
    make_client: MakeClient, sim: WhiteskySimulator
) -> None:
    client = make_client(timeout=(2.0, SHORT_READ))
    sim.fault(operation="listLocations", latency_ms=500)
    with pytest.raises(Unavailable) as caught:
        client.list_locations()
    assert caught.value.status is None
    assert "ReadTimeout" in caught.value.message


def test_a_slow_answer_is_waited_for_only_until_the_deadline_and_not_tried_again(
    make_client: MakeClient, sim: WhiteskySimulator, sleeps: list[float]
) -> None:
    client = make_client(deadline=time.monotonic() + SHORT_READ)
    sim.fault(operation="*", latency_ms=800)

    started = time.monotonic()
    with pytest.raises(Unavailable, match="ReadTimeout"):
        client.list_locations()

    assert time.monotonic() - started < READ_TIMEOUT
    assert sleeps == []
    # The call log records a call once it is answered: read it after the latency passed.
    time.sleep(max(0.0, started + 1.0 - time.monotonic()))
    assert len(operations_called(sim, "listLocations")) == 1


def test_a_call_after_the_deadline_is_not_sent_and_a_listing_says_why_it_is_incomplete(
    make_client: MakeClient, sim: WhiteskySimulator
) -> None:
    client = make_client(deadline=time.monotonic() - 1)

    with pytest.raises(DeadlinePassed, match="not sent") as caught:
        client.list_locations()
    listing = client.list_vgpus(location=LOCATION)

    assert caught.value.retryable
    assert not listing.complete
    assert isinstance(listing.error, DeadlinePassed)
    assert sim.calls()["calls"] == []


def test_unreachable_server_is_unavailable(make_client: MakeClient) -> None:
    client = make_client(api_url="http://127.0.0.1:9/api/1")
    with pytest.raises(Unavailable, match="could not connect"):
        client.list_locations()


# --- paginated listing ------------------------------------------------------------------


def test_failed_page_makes_the_listing_incomplete_and_keeps_the_error(
    make_client: MakeClient, client: WhiteskyClient, sim: WhiteskySimulator
) -> None:
    reserve_on_every_free_instance(client)  # five reservations
    sim.fault(operation="listCustomerVGPUS", status=503, skip=1)
    listing = make_client(page_size=2).list_vgpus(location=LOCATION)
    assert not listing.complete
    assert isinstance(listing.error, Unavailable)
    assert len(listing.items) == 2  # the first page, never silently presented as all


def test_listing_that_moves_between_pages_is_incomplete(
    client: WhiteskyClient, sim: WhiteskySimulator
) -> None:
    reserved = reserve_on_every_free_instance(client)

    class ReleasingDuringListing(WhiteskyClient):
        released = False

        def _send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
            response = super()._send(method, url, **kwargs)
            if url.endswith("/vgpus") and not self.released:
                self.released = True
                client.release_vgpu(location=LOCATION, vgpu_id=reserved[0])
            return response

    moving = ReleasingDuringListing(
        api_url=sim.api_url,
        customer_id=sim.customer_id,
        token=sim.token(),
        page_size=2,
        allowed_hosts=client.allowed_hosts,
    )
    listing = moving.list_vgpus(location=LOCATION)
    moving.close()
    assert not listing.complete
    assert isinstance(listing.error, IncompleteListing)


def test_listing_shorter_than_its_count_is_incomplete(
    client: WhiteskyClient, sim: WhiteskySimulator
) -> None:
    reserve_on_every_free_instance(client)

    class OverstatedCount(WhiteskyClient):
        def _send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
            response = super()._send(method, url, **kwargs)
            if url.endswith("/vgpus"):
                page = response.json()
                page["pagination"]["count"] += 1
                response._content = json.dumps(page).encode()
            return response

    lister = OverstatedCount(
        api_url=sim.api_url,
        customer_id=sim.customer_id,
        token=sim.token(),
        page_size=2,
        allowed_hosts=client.allowed_hosts,
    )
    listing = lister.list_vgpus(location=LOCATION)
    lister.close()
    assert not listing.complete
    assert isinstance(listing.error, IncompleteListing)
    assert len(listing.items) == 5


# --- writes -----------------------------------------------------------------------------


def test_reserve_is_never_retried(
    client: WhiteskyClient, sim: WhiteskySimulator, sleeps: list[float]
) -> None:
    sim.fault(operation="reserveVGPU", status=503, times=1)
    with pytest.raises(Unavailable):
        client.reserve_vgpu(location=LOCATION, gpu_id=card(client, "A100"), name="g0")
    assert len(operations_called(sim, "reserveVGPU")) == 1
    assert sleeps == []
    assert client.list_vgpus(location=LOCATION).items == ()


def test_server_error_on_a_reserve_is_outcome_unknown(
    client: WhiteskyClient, sim: WhiteskySimulator
) -> None:
    sim.fault(operation="reserveVGPU", status=500, times=1)
    with pytest.raises(ResponseLost) as caught:
        client.reserve_vgpu(location=LOCATION, gpu_id=card(client, "A100"), name="g0")
    assert caught.value.retryable


@pytest.mark.parametrize("lost", ["504", "drop"])
def test_lost_answer_to_a_reserve_is_outcome_unknown_and_the_reservation_is_found_by_name(
    client: WhiteskyClient, sim: WhiteskySimulator, lost: str
) -> None:
    sim.fault(operation="reserveVGPU", lost_response=lost, times=1)
    with pytest.raises(ResponseLost) as caught:
        client.reserve_vgpu(location=LOCATION, gpu_id=card(client, "A100"), name="capvco-x-gpu-0")
    assert caught.value.retryable
    assert len(operations_called(sim, "reserveVGPU")) == 1
    names = [vgpu.name for vgpu in client.list_vgpus(location=LOCATION).items]
    assert names == ["capvco-x-gpu-0"]


def test_reserve_timing_out_is_outcome_unknown(
    make_client: MakeClient, sim: WhiteskySimulator, sleeps: list[float]
) -> None:
    client = make_client(timeout=(2.0, SHORT_READ), long_timeout=(2.0, SHORT_READ))
    gpu_id = card(client, "A100")
    sim.fault(operation="reserveAndAttachVGPUToVM", latency_ms=800, times=1)
    vm_id = new_vm(client)
    with pytest.raises(ResponseLost):
        client.reserve_and_attach_vgpu(
            cloudspace_id=CLOUDSPACE, vm_id=vm_id, gpu_id=gpu_id, name="g0"
        )
    assert sleeps == []


def test_vm_create_with_a_lost_answer_is_outcome_unknown_and_the_vm_is_found_by_name(
    client: WhiteskyClient, sim: WhiteskySimulator
) -> None:
    sim.fault(operation="createVirtualMachine", lost_response="504", times=1)
    with pytest.raises(ResponseLost):
        new_vm(client, name="capvco-x-m-1")
    assert [vm.name for vm in client.list_vms(cloudspace_id=CLOUDSPACE)] == ["capvco-x-m-1"]
    assert len(operations_called(sim, "createVirtualMachine")) == 1


def test_lost_answer_to_a_permanent_vm_delete_is_repeated_and_gone_means_done(
    client: WhiteskyClient, sim: WhiteskySimulator
) -> None:
    vm_id = new_vm(client)
    sim.fault(operation="deleteVirtualMachine", lost_response="504", times=1)
    client.delete_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id, permanently=True)
    assert client.list_vms(cloudspace_id=CLOUDSPACE, include_deleted=True) == []
    assert len(operations_called(sim, "deleteVirtualMachine")) == 2


def test_lost_answer_to_a_stop_is_repeated(client: WhiteskyClient, sim: WhiteskySimulator) -> None:
    vm_id = new_vm(client)
    client.start_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id)
    sim.fault(operation="stopVirtualMachine", lost_response="drop", times=1)
    client.stop_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id)
    assert client.get_vm(cloudspace_id=CLOUDSPACE, vm_id=vm_id).status == "HALTED"


def test_lost_answer_to_a_release_is_repeated_and_gone_means_done(
    client: WhiteskyClient, sim: WhiteskySimulator
) -> None:
    vgpu_id = client.reserve_vgpu(location=LOCATION, gpu_id=card(client, "A100"), name="g0")
    sim.fault(operation="deleteVGPU", lost_response="504", times=1)
    client.release_vgpu(location=LOCATION, vgpu_id=vgpu_id)
    assert client.list_vgpus(location=LOCATION, include_deleted=True).items == ()


def test_nic_attach_refused_is_not_retried(client: WhiteskyClient, sim: WhiteskySimulator) -> None:
    vm_id = new_vm(client)
    sim.fault(operation="attachExternalNetworksVirtualMachine", status=503, times=1)
    with pytest.raises(Unavailable):
        client.send_external_nic_attach(
            cloudspace_id=CLOUDSPACE, vm_id=vm_id, external_network_id=NETWORK
        )
    assert len(operations_called(sim, "attachExternalNetworksVirtualMachine")) == 1
    assert client.list_vm_nics(cloudspace_id=CLOUDSPACE, vm_id=vm_id) == []


# --- the token --------------------------------------------------------------------------


def test_token_close_to_expiry_is_refreshed_before_the_call(
    make_client: MakeClient, sim: WhiteskySimulator
) -> None:
    sim.configure(token_ttl=30)
    short_lived = sim.token()
    sim.configure(token_ttl=3600)
    refreshed: list[str] = []
    client = make_client(token=short_lived, on_token_refreshed=refreshed.append)

    assert client.list_locations()
    (new_token,) = refreshed
    assert new_token != short_lived
    assert (jwt_expiry(new_token) or 0) > (jwt_expiry(short_lived) or 0)
    assert client.list_locations()
    assert len(refreshed) == 1  # the new token is good for an hour


def test_401_leads_to_one_refresh_and_the_call_succeeds(
    make_client: MakeClient, sim: WhiteskySimulator
) -> None:
    refreshed: list[str] = []
    client = make_client(on_token_refreshed=refreshed.append)
    sim.fault(operation="reserveVGPU", status=401, times=1)
    vgpu_id = client.reserve_vgpu(location=LOCATION, gpu_id=card(client, "A100"), name="g0")
    assert len(refreshed) == 1
    assert [v.vgpu_id for v in client.list_vgpus(location=LOCATION).items] == [vgpu_id]


def test_401_after_a_refresh_is_unauthorized(
    make_client: MakeClient, sim: WhiteskySimulator
) -> None:
    refreshed: list[str] = []
    client = make_client(on_token_refreshed=refreshed.append)
    sim.fault(operation="listLocations", status=401)
    with pytest.raises(Unauthorized) as caught:
        client.list_locations()
    assert not caught.value.retryable
    assert len(refreshed) == 1
    assert len(operations_called(sim, "listLocations")) == 2


def test_a_read_whose_401_finds_the_iam_failing_is_not_repeated(
    make_client: MakeClient, sim: WhiteskySimulator, sleeps: list[float]
) -> None:
    client = make_client()
    sim.fault(operation="listLocations", status=401, times=1)
    sim.fault(operation="refreshJWT", status=503)
    with pytest.raises(Unauthorized) as caught:
        client.list_locations()
    assert caught.value.operation == "refreshJWT"
    assert len(operations_called(sim, "listLocations")) == 1
    assert sleeps == []


def test_expired_token_that_the_iam_refuses_to_renew_is_unauthorized(
    make_client: MakeClient, sim: WhiteskySimulator
) -> None:
    client = make_client()
    sim.configure(token_expiry_uses_sim_clock=True)
    sim.advance(2 * 3600)
    with pytest.raises(Unauthorized) as caught:
        client.list_locations()
    assert caught.value.operation == "refreshJWT"


def test_failed_early_refresh_keeps_using_the_still_valid_token(
    make_client: MakeClient, sim: WhiteskySimulator
) -> None:
    sim.configure(token_ttl=30)
    refreshed: list[str] = []
    client = make_client(token=sim.token(), on_token_refreshed=refreshed.append)
    sim.fault(operation="refreshJWT", status=503)
    assert client.list_locations()
    assert refreshed == []


def test_token_appears_in_no_error_and_no_log_line(
    make_client: MakeClient, sim: WhiteskySimulator, caplog: pytest.LogCaptureFixture
) -> None:
    tokens: list[str] = [sim.token()]
    client = make_client(token=tokens[0], on_token_refreshed=tokens.append)
    sim.fault(operation="listLocations", status=401)
    sim.fault(operation="reserveVGPU", lost_response="504")
    errors: list[Exception] = []
    with caplog.at_level(logging.DEBUG):
        for call in (
            client.list_locations,
            lambda: client.reserve_vgpu(location=LOCATION, gpu_id="nope", name="g"),
        ):
            try:
                call()
            except Exception as exc:
                errors.append(exc)
    assert len(errors) == 2
    assert len(tokens) == 2
    for token in tokens:
        assert token not in caplog.text
        for error in errors:
            assert token not in str(error)
            assert token not in repr(error)
