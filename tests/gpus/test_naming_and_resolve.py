"""Owner names and type resolution: the rules, without a server."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpus.naming import Owner, owner_parse, vgpu_name
from gpus.resolve import GpuUnavailable, gpu_profile_resolve, gpu_type_of


@dataclass
class Card:
    profile_id: str
    vendor: str
    model: str
    available_instances: int


CARDS = [
    Card("a1", "NVIDIA", "A100 0000:3b:00.0", 1),
    Card("a2", "NVIDIA", "A100 0000:3c:00.0", 3),
    Card("a3", "NVIDIA", "A100 0000:3d:00.0", 2),
    Card("l1", "NVIDIA", "L40S 0000:5e:00.0", 4),
    Card("x1", "Dummy", "Dummy GPU 0000:f1:e1.0", 2),
]


def test_name_round_trips_to_its_owner_with_dashes_in_cluster_and_machine() -> None:
    name = vgpu_name("prod-eu", "gpu-a100-3", 1)
    assert name == "capvco-prod-eu-gpu-a100-3-gpu-1"
    assert owner_parse(name, {"prod": {"x"}, "prod-eu": {"gpu-a100"}}) == Owner(
        cluster="prod-eu", machine="gpu-a100-3", index=1
    )


def test_longest_cluster_name_wins_unless_the_shorter_one_has_the_pool() -> None:
    clusters = {"demo": {"a"}, "demo-a": {"x"}}
    assert owner_parse("capvco-demo-a-x-0-gpu-0", clusters) == Owner("demo-a", "x-0", 0)
    assert owner_parse("capvco-demo-a-0-gpu-0", clusters) == Owner("demo", "a-0", 0)


def test_our_prefix_without_a_known_cluster_is_ours_and_owned_by_nobody() -> None:
    assert owner_parse("capvco-gone-x-0-gpu-2", {"demo": {"a"}}) == Owner("", "", 2)


def test_a_name_without_our_prefix_is_not_ours() -> None:
    assert owner_parse("someone-elses-gpu", {"demo": {"a"}}) is None


def test_type_is_vendor_and_model_without_the_pci_address() -> None:
    assert gpu_type_of(CARDS[0]) == "NVIDIA A100"
    assert gpu_type_of(CARDS[4]) == "Dummy GPU"  # the model already names the vendor


@pytest.mark.parametrize("asked", ["NVIDIA A100", "nvidia  a100", "A100", "a100"])
def test_type_matches_exactly_or_by_contains_and_the_emptiest_card_wins(asked: str) -> None:
    assert gpu_profile_resolve(CARDS, location="nl", count=1, gpu_type=asked).profile_id == "a2"


def test_the_whole_count_must_fit_on_one_card() -> None:
    assert gpu_profile_resolve(CARDS, location="nl", count=3, gpu_type="A100").profile_id == "a2"
    with pytest.raises(GpuUnavailable) as refused:
        gpu_profile_resolve(CARDS, location="nl", count=4, gpu_type="A100")
    assert str(refused.value) == (
        "nl has no card of GPU type 'A100' with 4 free instance(s). It offers: "
        "Dummy GPU: 2 free on 1 card(s), at most 2 on one card; "
        "NVIDIA A100: 6 free on 3 card(s), at most 3 on one card; "
        "NVIDIA L40S: 4 free on 1 card(s), at most 4 on one card."
    )


def test_profile_id_pins_one_card_even_when_others_are_emptier() -> None:
    card = gpu_profile_resolve(CARDS, location="nl", count=1, profile_id="a1")
    assert card.profile_id == "a1"


def test_exact_tier_wins_over_contains() -> None:
    cards = [Card("t", "NVIDIA", "T4 0000:01:00.0", 1), Card("tx", "NVIDIA", "T4X 0000:02:00.0", 4)]
    assert (
        gpu_profile_resolve(cards, location="be", count=1, gpu_type="NVIDIA T4").profile_id == "t"
    )
