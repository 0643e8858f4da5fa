"""`GET /api/v1/gpu-types/`: what each location offers, per type, from its cards."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import GpuProfileFactory, LocationFactory, MembershipFactory

pytestmark = pytest.mark.django_db


def test_gpu_types_are_listed_per_location_with_free_instances_summed_over_cards() -> None:
    nl = LocationFactory(name="nl-1")
    be = LocationFactory(name="be-1", account=nl.account)
    elsewhere = LocationFactory(name="fr-1")  # another account's: not listed
    GpuProfileFactory(location=elsewhere, available_instances=4)
    GpuProfileFactory(location=nl, available_instances=3)
    GpuProfileFactory(location=nl, available_instances=5)
    GpuProfileFactory(
        location=be, vendor="NVIDIA", model="T4 (0000:01:00.0)", available_instances=2
    )
    api = APIClient()
    api.force_login(MembershipFactory(account=nl.account).user)

    rows = api.get("/api/v1/gpu-types/").json()

    assert rows == [
        {"location": "be-1", "gpu_type": "NVIDIA T4", "cards": 1, "free": 2, "most_on_one_card": 2},
        {
            "location": "nl-1",
            "gpu_type": "NVIDIA A100-SXM4-80GB",
            "cards": 2,
            "free": 8,
            "most_on_one_card": 5,
        },
    ]
