import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/", "/admin/"])
def test_pages_redirect_an_anonymous_visitor_to_login(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/") or response["Location"].startswith(
        "/admin/login/"
    )


@pytest.mark.parametrize("path", ["/api/v1/", "/api/v1/schema/"])
def test_api_refuses_an_anonymous_caller_without_redirecting(client: Client, path: str) -> None:
    response = client.get(path, HTTP_ACCEPT="application/json")
    assert response.status_code == 403
    assert response.json() == {
        "detail": "Authentication credentials were not provided.",
        "code": "not_authenticated",
    }


def test_login_page_is_open_and_logging_in_reaches_the_dashboard(client: Client, user) -> None:  # type: ignore[no-untyped-def]
    assert client.get("/login/").status_code == 200
    response = client.post(
        "/login/", {"username": "operator", "password": "s3cret-pass"}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/"
    assert b"Dashboard" in response.content


def test_login_with_a_wrong_password_is_refused(client: Client, user) -> None:  # type: ignore[no-untyped-def]
    response = client.post("/login/", {"username": "operator", "password": "wrong"})
    assert response.status_code == 200
    assert b"didn't match" in response.content
    assert client.get("/").status_code == 302


def test_logged_in_user_sees_the_api_and_its_openapi_schema(logged_in_client: Client) -> None:
    assert logged_in_client.get("/api/v1/").status_code == 200
    schema = logged_in_client.get("/api/v1/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    assert schema.json()["openapi"].startswith("3.")


def test_dashboard_status_fragment_is_served_to_htmx_alone(logged_in_client: Client) -> None:
    full = logged_in_client.get("/")
    fragment = logged_in_client.get("/", HTTP_HX_REQUEST="true")
    assert b"<html" in full.content and b'id="system-status"' in full.content
    assert b"<html" not in fragment.content and b'id="system-status"' in fragment.content
    assert "HX-Request" in fragment["Vary"]


def test_csrf_is_enforced_on_login(user) -> None:  # type: ignore[no-untyped-def]
    strict = Client(enforce_csrf_checks=True)
    response = strict.post("/login/", {"username": "operator", "password": "s3cret-pass"})
    assert response.status_code == 403
