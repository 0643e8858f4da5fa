"""Routing, error shapes, and the read-mostly resources (me, locations, cloudspaces, images)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from simulator.whitesky.api import ROUTES
from tests.simulator.support import BE, CS_NL, CUSTOMER, NL, Api

SPEC = Path(__file__).resolve().parents[2] / ".." / "shared" / "whitesky" / "whitesky-api.json"


def test_every_route_is_the_descriptions_path_method_and_operation_id() -> None:
    paths = json.loads(SPEC.read_text())["paths"]

    for method, template, operation_id, _handler in ROUTES:
        assert template in paths, template
        assert paths[template][method.lower()]["operationId"] == operation_id


def test_an_unknown_path_is_404_with_a_message(api: Api) -> None:
    response = api.get("/customers/cust-demo/teapots")

    assert response.status_code == 404
    assert response.json()["message"]


def test_an_unknown_path_is_404_even_without_a_token(api: Api) -> None:
    response = api.session.get(api.url("/nope"), headers={"Authorization": ""}, timeout=10)

    assert response.status_code == 404


def test_a_known_path_with_another_method_is_405(api: Api) -> None:
    response = api.session.put(api.url("/me"), timeout=10)

    assert response.status_code == 405
    assert response.headers["Allow"] == "GET"
    assert response.json()["message"]


def test_an_unknown_customer_is_404(api: Api) -> None:
    response = api.get("/customers/cust-nobody/cloudspaces")

    assert response.status_code == 404
    assert "cust-nobody" in response.json()["message"]


def test_a_location_the_customer_has_no_access_to_is_403(api: Api) -> None:
    response = api.get(f"/customers/{CUSTOMER}/locations/xx-nowhere-001/gpus")

    assert response.status_code == 403
    assert "no access to location" in response.json()["message"]


def test_a_non_integer_vm_id_is_404_like_a_flask_int_route(api: Api) -> None:
    assert api.get(f"/customers/{CUSTOMER}/cloudspaces/{CS_NL}/vms/abc").status_code == 404


def test_me_lists_the_customer_and_names_the_iam_domain(api: Api) -> None:
    body = api.get("/me").json()

    assert body["username"] == "demo-user"
    assert [c["customer_id"] for c in body["customers"]] == [CUSTOMER]
    assert body["iam_domain"] == api.sim.iam_url.removeprefix("http://")


def test_locations_list_both_demo_locations(api: Api) -> None:
    names = [row["name"] for row in api.get("/locations").json()["result"]]

    assert names == [NL, BE]


def test_each_location_has_an_ubuntu_24_04_image(api: Api) -> None:
    for location in (NL, BE):
        images = api.get(f"/customers/{CUSTOMER}/locations/{location}/vm-images").json()["result"]
        assert [image["name"] for image in images] == ["Ubuntu 24.04"]


def test_cloudspaces_are_listed_with_location_status(api: Api) -> None:
    body = api.get(f"/customers/{CUSTOMER}/cloudspaces").json()
    only_nl = api.get(f"/customers/{CUSTOMER}/cloudspaces", locations=NL).json()

    assert {cs["cloudspace_id"] for cs in body["result"]} == {"cs-demo-nl", "cs-demo-be"}
    assert {row["status"] for row in body["locations"]} == {"OK"}
    assert [cs["cloudspace_id"] for cs in only_nl["result"]] == ["cs-demo-nl"]


def test_cloudspace_info_has_a_string_external_network_id(api: Api) -> None:
    info = api.get(f"/customers/{CUSTOMER}/cloudspaces/{CS_NL}").json()

    assert info["external_network_id"] == "101"
    assert info["location"] == NL
    assert info["status"] == "DEPLOYED"


def test_create_cloudspace_takes_a_json_body_and_answers_its_id(api: Api) -> None:
    response = api.post(
        f"/customers/{CUSTOMER}/cloudspaces",
        {"name": "k8s", "location": NL, "firewall": {"private": False}},
    )

    assert response.status_code == 200, response.text
    cloudspace_id = response.json()["cloudspace_id"]
    info = api.get(f"/customers/{CUSTOMER}/cloudspaces/{cloudspace_id}").json()
    assert info["name"] == "k8s" and info["status"] == "DEPLOYED"


def test_create_cloudspace_without_firewall_is_400_naming_it(api: Api) -> None:
    response = api.post(f"/customers/{CUSTOMER}/cloudspaces", {"name": "k8s", "location": NL})

    assert response.status_code == 400
    assert "firewall" in response.json()["message"]


def test_create_cloudspace_with_parent_and_external_network_is_400(api: Api) -> None:
    firewall = {"private": True, "parent_cloudspace_id": CS_NL, "external_network_id": 101}

    response = api.post(
        f"/customers/{CUSTOMER}/cloudspaces", {"name": "x", "location": NL, "firewall": firewall}
    )

    assert response.status_code == 400


def test_deleting_a_cloudspace_that_holds_vms_is_409(api: Api) -> None:
    api.created_vm()

    response = api.delete(f"/customers/{CUSTOMER}/cloudspaces/{CS_NL}")

    assert response.status_code == 409


def test_deleting_an_empty_cloudspace_moves_it_to_the_recycle_bin(api: Api) -> None:
    response = api.delete(f"/customers/{CUSTOMER}/cloudspaces/{CS_NL}")

    assert response.status_code == 200
    listed = api.get(f"/customers/{CUSTOMER}/cloudspaces").json()["result"]
    deleted = api.get(f"/customers/{CUSTOMER}/cloudspaces", only_deleted="true").json()["result"]
    assert CS_NL not in {cs["cloudspace_id"] for cs in listed}
    assert [cs["status"] for cs in deleted] == ["DELETED"]


def test_a_bad_json_body_is_400(api: Api) -> None:
    response = api.session.post(
        api.url(f"/customers/{CUSTOMER}/locations/{NL}/gpus/x"),
        data="{not json",
        headers={"Content-Type": "application/json"},
        timeout=10,
    )

    assert response.status_code == 400


def test_a_chunked_request_body_is_read(api: Api) -> None:
    def body() -> Iterator[bytes]:
        yield b'{"vgpu_name": '
        yield b'"streamed"}'

    response = api.session.post(
        api.url(f"/customers/{CUSTOMER}/locations/{NL}/gpus/nl-rmd-dc01-001-0000-3b-00-0"),
        data=body(),
        headers={"Content-Type": "application/json"},
        timeout=10,
    )

    assert response.status_code == 200, response.text
    assert api.get("/me").status_code == 200, "the kept-alive connection still works"
