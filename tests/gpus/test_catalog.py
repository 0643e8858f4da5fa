"""The account's cloudspaces and images per location are mirrored, so a new site can be set
up from what whitesky offers without calling whitesky by hand. They change seldom: beat
lists them on their own slower beat (observe_catalog), not on every observe pass."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from cloud.models import Account, Cloudspace, Image, Location
from clusters.tasks import observe_account, observe_catalog
from tests.factories import AccountFactory, LocationFactory, MembershipFactory, UserFactory
from tests.gpus.conftest import NL, Plane


def catalog_writes(run: Any) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        run()
    return [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith(("INSERT", "UPDATE", "DELETE"))
        and ("cloud_cloudspace" in q["sql"] or "cloud_image" in q["sql"])
    ]


def test_cloudspaces_and_images_of_each_location_are_mirrored_and_an_idle_pass_writes_none(
    plane: Plane,
) -> None:
    observe_catalog(plane.account.pk)

    mirrored_cloudspaces = {
        (c.location.name, c.cloudspace_id)
        for c in Cloudspace.objects.filter(location__account=plane.account)
    }
    assert mirrored_cloudspaces
    assert {location for location, _ in mirrored_cloudspaces} >= {NL}
    images = Image.objects.filter(location__account=plane.account)
    assert images.filter(location__name=NL).exists()
    assert all(image.name for image in images)
    assert catalog_writes(lambda: observe_catalog(plane.account.pk)) == []


def test_a_failed_listing_changes_nothing_and_a_whole_one_drops_what_is_gone(
    plane: Plane,
) -> None:
    observe_catalog(plane.account.pk)
    location = plane.location(NL)
    gone = Image.objects.create(location=location, image_id=999_999, name="retired", status="")
    before = set(Image.objects.values_list("pk", flat=True))

    plane.sim.fault(operation="listCustomerImages", status=503)
    observe_catalog(plane.account.pk)  # the image listing failed: nothing is decided
    assert set(Image.objects.values_list("pk", flat=True)) == before

    plane.sim.clear_faults()
    observe_catalog(plane.account.pk)  # a whole listing, taken after the row was written
    assert not Image.objects.filter(pk=gone.pk).exists()
    assert Image.objects.filter(location=location).exists()


def test_a_member_lists_the_cloudspaces_and_images_of_their_account_only(plane: Plane) -> None:
    observe_catalog(plane.account.pk)
    other: Account = AccountFactory()
    theirs: Location = LocationFactory(account=other)
    Cloudspace.objects.create(location=theirs, cloudspace_id="cs-x", name="theirs", status="")
    viewer = UserFactory()
    MembershipFactory(user=viewer, account=plane.account, role="viewer")
    api = APIClient()
    api.force_authenticate(viewer)

    location = plane.location(NL)
    shown = api.get("/api/v1/cloudspaces/", {"location": location.pk, "limit": 1000}).json()
    assert {c["cloudspace_id"] for c in shown["results"]} == set(
        Cloudspace.objects.filter(location=location).values_list("cloudspace_id", flat=True)
    )
    everything = api.get("/api/v1/cloudspaces/", {"limit": 1000}).json()["results"]
    assert "cs-x" not in {c["cloudspace_id"] for c in everything}
    images = api.get("/api/v1/images/", {"location": location.pk}).json()["results"]
    assert images and all(i["location"] == location.pk for i in images)


def test_the_observe_pass_leaves_the_catalog_to_its_own_beat(plane: Plane) -> None:
    plane.sim.clear_calls()
    observe_account(plane.account.pk)
    listed = {c["operation"] for c in plane.sim.calls()["calls"]}
    assert "listCustomerLocations" in listed
    assert not listed & {"listCloudspaces", "listCustomerImages"}
    assert not Cloudspace.objects.exists() and not Image.objects.exists()

    observe_catalog(plane.account.pk)
    assert Cloudspace.objects.filter(location__account=plane.account).exists()
    assert Image.objects.filter(location__account=plane.account).exists()


def test_beat_sends_the_catalog_of_every_account_on_its_own_interval() -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["observe-catalog"]
    assert entry["task"] == "clusters.tasks.observe_catalog_all"
    assert entry["schedule"] == settings.CATALOG_OBSERVE_INTERVAL
    assert settings.CATALOG_OBSERVE_INTERVAL > settings.OBSERVE_INTERVAL
