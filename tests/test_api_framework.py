"""What every endpoint of the API shares: no input answers a 500, every error has one shape,
input is taken as documented or refused naming the problem, and the schema, the API root
and the interactive page say what there is."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.test import Client
from rest_framework.test import APIClient

from capvco_web.api import exception_handler
from capvco_web.models import ApiToken
from capvco_web.tokens import MAX_TOKENS_PER_USER
from cloud.models import Account, Membership, conflict
from clusters.models import Cluster, MachinePool
from tests.api_fuzz import served_schema
from tests.factories import (
    JWT,
    AccountFactory,
    ClusterFactory,
    ClusterSiteFactory,
    MachineFactory,
    MachinePoolFactory,
    MembershipFactory,
    UserFactory,
    VgpuReservationFactory,
    role_group,
)
from tests.test_auth import inline_code

pytestmark = pytest.mark.django_db

ERROR_KEYS = {"detail", "code"}


def schema(api: APIClient) -> dict[str, Any]:
    response = api.get("/api/v1/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return dict(response.json())


# --- no 500 from any input ---------------------------------------------------------------


@pytest.mark.parametrize("limit", [str(2**63), "1" + "0" * 5000])
def test_an_absurd_page_size_is_read_as_the_largest_page(api: APIClient, limit: str) -> None:
    AccountFactory.create_batch(2)

    response = api.get("/api/v1/accounts/", {"limit": limit})

    assert response.status_code == 200
    assert response.json()["count"] == 2
    assert (
        "limit=1000"
        in (api.get("/api/v1/accounts/", {"limit": limit, "offset": 1}).json()["previous"])
    )


@pytest.mark.parametrize("offset", [str(2**63), "9" * 5000])
def test_an_offset_past_every_row_answers_an_empty_page(api: APIClient, offset: str) -> None:
    AccountFactory()

    response = api.get("/api/v1/accounts/", {"offset": offset})

    assert response.status_code == 200
    assert (response.json()["count"], response.json()["results"]) == (1, [])


@pytest.mark.parametrize(
    ("query", "param"),
    [("limit=-1", "limit"), ("limit=0", "limit"), ("limit=ten", "limit"), ("offset=-5", "offset"),
     ("offset=1.5", "offset"), ("limit=5&limit=x", "limit")],
)  # fmt: skip
def test_a_page_parameter_that_is_not_a_whole_number_is_refused(
    api: APIClient, query: str, param: str
) -> None:
    response = api.get(f"/api/v1/accounts/?{query}")

    assert response.status_code == 400
    assert list(response.json()["fields"]) == [param]


def test_json_nested_thousands_deep_is_refused(api: APIClient) -> None:
    body = "[" * 5000 + "]" * 5000

    response = api.post("/api/v1/clusters/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "detail": "JSON nested deeper than 32 levels.",
        "code": "parse_error",
    }


def test_json_nested_past_the_limit_is_refused_before_anything_reads_it(api: APIClient) -> None:
    body = '{"name": ' + "[" * 40 + "]" * 40 + "}"

    response = api.post("/api/v1/clusters/", body, content_type="application/json")

    assert (response.status_code, response.json()["code"]) == (400, "parse_error")


def test_a_body_that_is_not_utf8_is_refused(api: APIClient) -> None:
    response = api.post(
        "/api/v1/clusters/", b'{"name": "\xff\xfe"}', content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json() == {"detail": "The request body is not UTF-8.", "code": "parse_error"}


def test_a_body_that_is_not_json_is_refused_as_unsupported(api: APIClient) -> None:
    response = api.post(
        "/api/v1/clusters/", "name=x", content_type="application/x-www-form-urlencoded"
    )

    assert (response.status_code, response.json()["code"]) == (415, "unsupported_media_type")


@pytest.mark.parametrize("method", ["post", "put", "patch"])
def test_a_body_larger_than_the_api_reads_answers_413_in_the_error_shape(
    api: APIClient, method: str
) -> None:
    account = AccountFactory()
    url = "/api/v1/accounts/" if method == "post" else f"/api/v1/accounts/{account.pk}/"
    body = json.dumps({"name": "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE})

    response = getattr(api, method)(url, body, content_type="application/json")

    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "detail": "The request body is larger than the API reads: at most 2,621,440 bytes.",
        "code": "too_large",
    }
    assert Account.objects.get().name == account.name


@pytest.mark.parametrize("debug", [False, True])  # `make run` runs with DEBUG on
@pytest.mark.parametrize("path", ["/api/v1/clusters/a.b/", "/api", "/api/v2/", "/api/v1/nope"])
def test_an_unknown_api_url_answers_404_in_the_error_shape(
    api: APIClient, path: str, debug: bool, settings: Any
) -> None:
    settings.DEBUG = debug
    response = api.get(path, HTTP_ACCEPT="text/html")

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found.", "code": "not_found"}


def test_an_endpoint_without_its_trailing_slash_is_sent_to_it(api: APIClient) -> None:
    response = api.get("/api/v1/clusters?name=x")

    assert response.status_code == 301
    assert response["Location"] == "/api/v1/clusters/?name=x"


# --- unknown fields and wrong types are refused, naming them ------------------------------


def test_unknown_and_read_only_fields_are_refused_naming_each(api: APIClient) -> None:
    account = AccountFactory()

    response = api.post(
        "/api/v1/clusters/",
        {"name": "c", "account": account.pk, "colour": "red", "state": "deleting"},
    )

    assert response.status_code == 400
    assert response.json()["fields"] == {
        "colour": ["Unknown field."],
        "state": ["Read-only field: leave it out."],
    }
    assert not Cluster.objects.exists()


def test_unknown_fields_of_a_nested_object_are_refused(api: APIClient) -> None:
    site = ClusterSiteFactory()
    body = {"cluster": site.cluster_id, "site": site.pk, "name": "p", "gpu": {"kind": "A100"}}

    response = api.post("/api/v1/pools/", body)

    assert response.status_code == 400
    assert response.json()["fields"] == {"gpu": {"kind": ["Unknown field."]}}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("replicas", "2", "Give a whole number, not a string."),
     ("replicas", True, "Give a whole number, not a boolean."),
     ("name", 5, "Give a string, not a number."),
     ("cluster", "1", "Give a whole number, not a string."),
     ("gpu", [], "Give an object, not an array.")],
)  # fmt: skip
def test_a_value_of_another_type_than_documented_is_refused_not_coerced(
    api: APIClient, field: str, value: object, message: str
) -> None:
    site = ClusterSiteFactory()
    body = {"cluster": site.cluster_id, "site": site.pk, "name": "p", field: value}

    response = api.post("/api/v1/pools/", body)

    assert response.status_code == 400
    assert response.json()["fields"] == {field: [message]}
    assert not MachinePool.objects.exists()


def test_an_account_setting_as_a_string_is_refused(api: APIClient) -> None:
    account = AccountFactory()

    response = api.patch(f"/api/v1/accounts/{account.pk}/", {"orphan_auto_release": "no"})

    assert response.json()["fields"] == {"orphan_auto_release": ["Give a boolean, not a string."]}


def test_strings_are_stored_as_sent_so_their_documented_length_holds(api: APIClient) -> None:
    account = AccountFactory()

    response = api.patch(f"/api/v1/accounts/{account.pk}/", {"customer_id": " c-1 "})

    assert response.status_code == 200
    account.refresh_from_db()
    assert account.customer_id == " c-1 "


# --- valid requests that the database refuses answer 409 ----------------------------------


def test_a_name_taken_answers_409_naming_the_field(api: APIClient) -> None:
    taken = AccountFactory()
    body = {"name": taken.name, "api_url": taken.api_url, "iam_url": taken.iam_url,
            "customer_id": "c-2", "credential": taken.credential}  # fmt: skip

    response = api.post("/api/v1/accounts/", body)

    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    assert list(response.json()["fields"]) == ["name"]


def test_an_object_named_that_does_not_exist_answers_409(api: APIClient) -> None:
    response = api.post("/api/v1/clusters/", {"name": "c", "account": 999_999})

    assert response.status_code == 409
    assert response.json()["fields"] == {
        "account": ['Invalid pk "999999" - object does not exist.']
    }


def test_invalid_input_besides_a_missing_object_answers_400(api: APIClient) -> None:
    response = api.post("/api/v1/clusters/", {"name": "Not A Label", "account": 999_999})

    assert response.status_code == 400
    assert set(response.json()["fields"]) == {"name", "account"}


# --- filters -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/api/v1/clusters/?account=999999", "/api/v1/locations/?account=999999",
     "/api/v1/sites/?cluster=999999", "/api/v1/pools/?site=999999",
     "/api/v1/machines/?pool=999999", "/api/v1/gpu-profiles/?location=999999",
     "/api/v1/reservations/?location=999999", "/api/v1/clusters/?account=" + "9" * 40],
)  # fmt: skip
def test_a_filter_by_an_id_that_does_not_exist_answers_an_empty_list(
    api: APIClient, path: str
) -> None:
    MachineFactory()

    response = api.get(path)

    assert response.status_code == 200
    assert response.json()["results"] == []


def test_a_filter_by_id_finds_the_rows_of_that_id(api: APIClient) -> None:
    mine, other = ClusterFactory(), ClusterFactory()

    response = api.get("/api/v1/clusters/", {"account": mine.account_id})

    assert [row["name"] for row in response.json()["results"]] == [mine.name]
    assert other.name not in response.content.decode()


@pytest.mark.parametrize(
    "query",
    ["account=x", "account=1.0", "account=", "state=", "account=1&account=x", "state=gone"],
)
def test_a_filter_value_that_is_not_one_is_refused(api: APIClient, query: str) -> None:
    response = api.get(f"/api/v1/clusters/?{query}")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"


@pytest.mark.parametrize(
    ("value", "status"), [("true", 200), ("false", 200), ("yes", 400), ("1", 400)]
)
def test_orphaned_filter_takes_true_or_false_only(api: APIClient, value: str, status: int) -> None:
    VgpuReservationFactory(orphaned=True)

    response = api.get("/api/v1/reservations/", {"orphaned": value})

    assert response.status_code == status
    if value == "true":
        assert response.json()["count"] == 1


@pytest.mark.parametrize(
    ("q", "status"),
    [("abc", 200), ("  abc ", 200), ("", 200), ("   ", 200), ("ab", 400), (" ab  ", 400),
     ("a" * 200, 200), ("a" * 201, 400)],
)  # fmt: skip
def test_a_search_is_taken_exactly_when_the_schema_pattern_says(
    api: APIClient, q: str, status: int
) -> None:
    parameters = schema(api)["paths"]["/api/v1/reservations/"]["get"]["parameters"]
    (pattern,) = (p["schema"]["pattern"] for p in parameters if p["name"] == "q")

    response = api.get("/api/v1/reservations/", {"q": q})

    assert response.status_code == status
    assert bool(re.fullmatch(pattern, q)) is (status == 200)


# --- the schema says what the API does ------------------------------------------------------


def test_every_operation_documents_its_errors_in_the_one_shape(api: APIClient) -> None:
    document = schema(api)

    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert {"401", "403", "406", "429"} <= set(responses), (method, path)
            for code, response in responses.items():
                if code >= "400":
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/Error"
                    }, (method, path, code)
    error = document["components"]["schemas"]["Error"]
    assert set(error["required"]) == ERROR_KEYS


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", "/api/v1/reservations/"), ("post", "/api/v1/sriov/agent/gc/")],
)
def test_an_accept_header_nothing_answers_in_is_refused_as_documented(
    api: APIClient, method: str, path: str
) -> None:
    # A node agent's operation too: content is negotiated before anyone authenticates.
    response = getattr(api, method)(path, HTTP_ACCEPT="application/xml")

    assert response.status_code == 406
    assert set(response.json()) >= ERROR_KEYS
    assert "406" in schema(api)["paths"][path][method]["responses"]


def test_every_request_body_refuses_unknown_fields_in_the_schema_too(api: APIClient) -> None:
    components = schema(api)["components"]["schemas"]

    bodies = [name for name in components if name.endswith("Request")]
    assert bodies
    for name in bodies:
        assert components[name]["additionalProperties"] is False, name


def test_cluster_delete_documents_the_reason_and_typed_name_it_requires(api: APIClient) -> None:
    document = schema(api)
    delete = document["paths"]["/api/v1/clusters/{id}/"]["delete"]

    assert delete["requestBody"]["required"] is True
    body = delete["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ConfirmedDeleteRequest"}
    confirmed = document["components"]["schemas"]["ConfirmedDeleteRequest"]
    assert sorted(confirmed["required"]) == ["confirm", "reason"]
    assert "409" in delete["responses"]


def test_the_plan_is_documented_as_the_list_of_steps_it_is(api: APIClient) -> None:
    document = schema(api)
    plan = document["paths"]["/api/v1/clusters/{id}/plan/"]["get"]

    assert [p["name"] for p in plan["parameters"]] == ["id"]  # no page, no filter
    assert plan["responses"]["200"]["content"]["application/json"]["schema"] == {
        "type": "array",
        "items": {"$ref": "#/components/schemas/PlanStep"},
    }
    pool = MachinePoolFactory(replicas=1)
    steps = api.get(f"/api/v1/clusters/{pool.cluster_id}/plan/").json()
    assert [step["action"] for step in steps] == ["create"]
    paged = api.get(f"/api/v1/clusters/{pool.cluster_id}/plan/", {"limit": 1})
    assert paged.status_code == 400 and paged.json()["unknown_parameters"] == ["limit"]
    # Each step carries the ids act uses and the writes it makes.
    step = document["components"]["schemas"]["PlanStep"]["properties"]
    for name in ("index", "vm_id", "reserve_vgpus", "release_vgpus", "vms_removed", "calls"):
        assert name in step
    location = document["paths"]["/api/v1/locations/{id}/plan/"]["get"]
    assert [p["name"] for p in location["parameters"]] == ["id"]
    assert location["responses"]["200"]["content"]["application/json"]["schema"] == {
        "type": "array",
        "items": {"$ref": "#/components/schemas/LocationPlanStep"},
    }


def test_string_lengths_in_the_schema_are_the_ones_enforced(api: APIClient) -> None:
    gpu = schema(api)["components"]["schemas"]["PoolGpuRequest"]["properties"]
    site = ClusterSiteFactory()
    body = {"cluster": site.cluster_id, "site": site.pk, "name": "p",
            "gpu": {"type": "x" * (gpu["type"]["maxLength"] + 1), "count": 1}}  # fmt: skip

    response = api.post("/api/v1/pools/", body)

    assert gpu["type"]["maxLength"] == 100
    assert response.status_code == 400
    assert list(response.json()["fields"]["gpu"]) == ["type"]


def test_a_pool_gpu_object_is_taken_whole_on_patch_too(api: APIClient) -> None:
    pool = MachinePoolFactory(gpus=True)

    response = api.patch(f"/api/v1/pools/{pool.pk}/", {"gpu": {"type": "NVIDIA T4"}})

    assert response.status_code == 400  # count left out: 0, and a type with no GPU
    assert list(response.json()["fields"]["gpu"]) == ["count"]


# --- the endpoints of roles, tokens and Kubernetes keep the same contract ---------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [("post", "/api/v1/pools/{pool}/scale/"), ("post", "/api/v1/memberships/"),
     ("patch", "/api/v1/memberships/{membership}/"), ("post", "/api/v1/tokens/"),
     ("put", "/api/v1/clusters/{cluster}/kubeconfig/"),
     ("delete", "/api/v1/clusters/{cluster}/kubeconfig/"),
     ("delete", "/api/v1/machines/{machine}/"),
     ("post", "/api/v1/machines/{machine}/force-delete/")],
)  # fmt: skip
def test_every_new_write_refuses_an_unknown_field_naming_it(
    client: Client, method: str, path: str
) -> None:
    machine = MachineFactory()
    membership = MembershipFactory(account=machine.pool.cluster.account)
    client.force_login(UserFactory(is_staff=True, is_superuser=True))  # a session: tokens too
    url = path.format(
        pool=machine.pool_id, membership=membership.pk, cluster=machine.pool.cluster_id,
        machine=machine.pk,
    )  # fmt: skip

    response = getattr(client, method)(url, {"colour": "red"}, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["fields"]["colour"] == ["Unknown field."]


def test_a_membership_of_a_user_name_no_user_can_have_is_refused_not_a_500(
    api: APIClient,
) -> None:
    account = AccountFactory()
    role_group("viewer")  # a flush by an earlier transactional test leaves no roles
    body = {"user": "ann\x00", "account": account.pk, "role": "viewer"}

    response = api.post("/api/v1/memberships/", body)

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["user"]
    assert not Membership.objects.exists()


def test_a_role_that_is_none_of_the_roles_is_refused_as_invalid(api: APIClient) -> None:
    user, account = UserFactory(), AccountFactory()

    response = api.post(
        "/api/v1/memberships/", {"user": user.username, "account": account.pk, "role": "owner"}
    )

    assert response.status_code == 400
    assert response.json()["fields"] == {"role": ["Choose one of viewer, operator, admin."]}
    components = schema(api)["components"]["schemas"]
    role = components["MembershipRequest"]["properties"]["role"]["allOf"][0]["$ref"]
    assert components[role.rsplit("/", 1)[1]]["enum"] == ["viewer", "operator", "admin"]


def test_a_token_past_the_most_a_user_may_have_answers_409(client: Client) -> None:
    user = UserFactory()
    ApiToken.objects.bulk_create(
        ApiToken(user=user, name=f"t{n}", key_id=f"{n:012x}", token_hash="0" * 64)
        for n in range(MAX_TOKENS_PER_USER)
    )
    client.force_login(user)

    response = client.post("/api/v1/tokens/", {"name": "one more"}, content_type="application/json")

    assert response.status_code == 409  # revoking one makes the same request pass
    assert list(response.json()["fields"]) == ["user"]


def test_a_models_refusal_at_save_keeps_its_conflict(api: APIClient) -> None:
    # A check made again under a lock, at save (a name taken since it was validated).
    refused = ValidationError({"name": conflict("Cluster 'x' exists.")})

    response = exception_handler(refused, {})

    assert response is not None
    assert response.status_code == 409
    assert response.data["fields"] == {"name": ["Cluster 'x' exists."]}


def test_the_schema_says_who_may_and_how_to_authenticate(api: APIClient) -> None:
    document = schema(api)
    scale = document["paths"]["/api/v1/pools/{id}/scale/"]["post"]

    assert "role" in scale["responses"]["403"]["description"]
    assert "not a member" in scale["responses"]["404"]["description"]
    assert {"tokenAuth": []} in scale["security"]
    assert document["components"]["securitySchemes"]["tokenAuth"]["scheme"] == "bearer"
    assert "/api/v1/nodes/{id}/" in document["paths"] and "/api/v1/tokens/" in document["paths"]


# --- account fields state their rules -------------------------------------------------------


def account_body(**changes: Any) -> dict[str, Any]:
    return {"name": "b", "api_url": "https://vco.example/api/1",
            "iam_url": "https://iam.example", "customer_id": "c-2",
            "credential": JWT, **changes}  # fmt: skip


@pytest.mark.parametrize(
    ("url", "taken"),
    [("https://vco.example/api/1", True), ("https://vco.example:443/api/1", True),
     ("https://vco.example:8443/api/1", False),  # a bare host in the list: port 443 only
     ("https://vco.example/api/1?x=1", False), ("https://vco.example/api/1#top", False),
     ("HTTPS://vco.example/api/1", False), ("https://vco.example./api/1", False),
     ("https://vco.example:08443/api/1", False), ("https://collector.example/api/1", False)],
)  # fmt: skip
def test_an_account_url_is_taken_exactly_when_the_schema_pattern_says(
    api: APIClient, url: str, taken: bool
) -> None:
    pattern = schema(api)["components"]["schemas"]["AccountRequest"]["properties"]["api_url"]

    response = api.post("/api/v1/accounts/", account_body(api_url=url))

    assert bool(re.fullmatch(pattern["pattern"], url)) is taken
    assert response.status_code == (201 if taken else 400), response.json()
    if not taken:
        assert list(response.json()["fields"]) == ["api_url"]


@pytest.mark.parametrize(
    ("given", "stored"),
    [("00:00:00", timedelta(0)), ("01:30:00", timedelta(minutes=90)),
     ("2 00:00:00", timedelta(days=2)), ("89 23:59:59.5", timedelta(days=90, seconds=-0.5)),
     ("90 00:00:00", timedelta(days=90)), ("90 00:00:01", None), ("PT1H", None),
     ("3600", None), ("-1 00:00:00", None), ("0 01:00:00", None), ("24:00:00", None)],
)  # fmt: skip
def test_an_orphan_grace_period_is_taken_exactly_when_the_schema_pattern_says(
    api: APIClient, given: str, stored: timedelta | None
) -> None:
    account = AccountFactory()
    pattern = schema(api)["components"]["schemas"]["AccountRequest"]["properties"][
        "orphan_grace_period"
    ]["pattern"]

    response = api.patch(f"/api/v1/accounts/{account.pk}/", {"orphan_grace_period": given})

    assert bool(re.fullmatch(pattern, given)) is (stored is not None)
    account.refresh_from_db()
    if stored is None:
        assert response.status_code == 400
        assert list(response.json()["fields"]) == ["orphan_grace_period"]
    else:
        assert (response.status_code, account.orphan_grace_period) == (200, stored)
        assert re.fullmatch(pattern, response.json()["orphan_grace_period"])  # as answered


def test_moving_an_account_url_without_the_credential_answers_409(api: APIClient) -> None:
    account = AccountFactory()

    moved = api.patch(f"/api/v1/accounts/{account.pk}/", {"api_url": "https://vco.example/v2"})
    kept = api.patch(f"/api/v1/accounts/{account.pk}/", {"api_url": account.api_url})

    assert moved.status_code == 409  # the same request keeping the stored URL passes
    assert list(moved.json()["fields"]) == ["credential"]
    assert kept.status_code == 200
    assert Account.objects.get(pk=account.pk).api_url == account.api_url


# --- the API root and its interactive page ---------------------------------------------------


def test_the_api_root_lists_every_endpoint(api: APIClient) -> None:
    root = api.get("/api/v1/", HTTP_ACCEPT="application/json").json()
    paths = schema(api)["paths"]

    listed = {url.removeprefix("http://testserver") for url in root.values()}
    collections = listed - {"/api/v1/schema/", "/api/v1/docs/"}
    # Every collection listed is served; every path is under a collection listed, or
    # (a group such as /api/v1/sriov/) under a folder holding listed collections.
    assert all(any(path.startswith(url) for path in paths) for url in collections)
    for path in paths:
        top = "/api/v1/" + path.split("/")[3] + "/"
        assert any(path.startswith(url) or url.startswith(top) for url in collections), path


class PageFiles(HTMLParser):
    """The files a page loads: scripts and style sheets (and its icon)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        url = named.get("src") if tag == "script" else named.get("href") if tag == "link" else None
        if url:
            self.found.append(url)


def page_files(html: bytes) -> list[str]:
    parser = PageFiles()
    parser.feed(html.decode())
    return parser.found


def test_the_interactive_api_page_works_under_the_content_security_policy(
    client: Client,
) -> None:
    client.force_login(UserFactory())

    page = client.get("/api/v1/docs/")

    assert page.status_code == 200
    assert page["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY
    assert inline_code(page.content) == []  # the policy allows no inline script or style
    files = page_files(page.content)
    sidecar = "/static/drf_spectacular_sidecar/swagger-ui-dist/"
    assert {f"{sidecar}swagger-ui-bundle.js", f"{sidecar}swagger-ui.css",
            "/static/css/api-docs.css", "/api/v1/docs/?script="} <= set(files)  # fmt: skip
    for url in files:  # all of our own origin (no CDN), and all there
        assert url.startswith("/"), url
        response = client.get(url)
        assert response.status_code == 200, url
        kind = "css" if url.endswith(".css") else "png" if url.endswith(".png") else "javascript"
        assert kind in response["Content-Type"], url
    script = client.get("/api/v1/docs/", {"script": ""}).content.decode()
    assert '"/api/v1/schema/"' in script
    assert '"validatorUrl": null' in script  # no badge fetched from validator.swagger.io


def test_the_navigation_links_the_api_page(client: Client) -> None:
    client.force_login(UserFactory())

    assert 'href="/api/v1/docs/"' in client.get("/").content.decode()


def test_the_served_schema_is_the_one_the_contract_run_checks(api: APIClient) -> None:
    assert schema(api) == json.loads(json.dumps(served_schema()))
