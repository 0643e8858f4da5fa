"""Owner names and type resolution: the rules, without a server."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpus.naming import (
    NOBODY,
    Owner,
    cluster_name_conflict,
    owner_parse,
    pool_name_conflict,
    vgpu_name,
    vm_name,
)
from gpus.resolve import (
    FitRefusal,
    GpuBusy,
    GpuUnavailable,
    fit_refusal,
    gpu_profile_resolve,
    gpu_type_of,
)


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


def test_name_round_trips_to_its_owner_with_dashes_in_cluster_and_pool() -> None:
    name = vgpu_name("prod-eu", "gpu-a100-3", 1)
    assert name == "capvco-prod-eu-gpu-a100-3-gpu-1"
    assert owner_parse(name, {"staging": {"x"}, "prod-eu": {"gpu-a100"}}) == Owner(
        cluster="prod-eu", machine="gpu-a100-3", index=1, pool="gpu-a100", machine_index=3
    )


def test_vm_name_parses_to_its_machine_without_a_gpu_index() -> None:
    assert owner_parse(vm_name("demo", "a100-12"), {"demo": {"a100"}}) == Owner(
        cluster="demo", machine="a100-12", index=None, pool="a100", machine_index=12
    )


@pytest.mark.parametrize("pool", ["gpu", "x-gpu", "gpu-1", "gpu-gpu"])
def test_pools_named_like_the_gpu_suffix_parse_to_their_machine(pool: str) -> None:
    pools = {"c": {pool, "cpu"}, "d": {"gpu"}}
    machine = f"{pool}-0"
    assert owner_parse(vm_name("c", machine), pools) == Owner("c", machine, None, pool, 0)
    assert owner_parse(vgpu_name("c", machine, 2), pools) == Owner("c", machine, 2, pool, 0)


def test_our_prefix_without_a_known_cluster_is_ours_and_owned_by_nobody() -> None:
    assert owner_parse("capvco-gone-x-0-gpu-2", {"demo": {"a"}}) == NOBODY
    assert NOBODY.cluster == ""


def test_a_known_cluster_without_the_pool_is_owned_by_nobody() -> None:
    assert owner_parse("capvco-demo-b-0", {"demo": {"a"}}) == NOBODY


@pytest.mark.parametrize(
    "name",
    [
        "capvco-demo-a",  # no machine index
        "capvco-demo-a-",
        "capvco-demo-a-x",
        "capvco-demo-a-01",  # we never write a leading zero
        "capvco-demo-a-0-gpu",
        "capvco-demo-a-0-gpu-",
        "capvco-demo-a-0-gpu-01",
        "capvco-demo-a-0-gpu-1-gpu-1",
        "capvco-demo-a-0-extra",
        "capvco-demo-a-0 ",
        "capvco-demo-a-0\n",
        "capvco-demo-a-\u0661",  # a digit, but not one we write
        "capvco-demo-a-1234567890",  # more digits than any index has
    ],
)
def test_a_name_not_exactly_of_our_structure_is_owned_by_nobody(name: str) -> None:
    assert owner_parse(name, {"demo": {"a"}}) == NOBODY


def test_a_name_without_our_prefix_is_not_ours() -> None:
    assert owner_parse("someone-elses-gpu", {"demo": {"a"}}) is None
    assert owner_parse("capvco", {"demo": {"a"}}) is None
    assert owner_parse("Capvco-demo-a-0", {"demo": {"a"}}) is None


def test_a_name_that_reads_as_two_owners_is_not_claimed_by_either() -> None:
    # Only clusters named before the rules were enforced can overlap like this.
    legacy = {"x": {"y-z"}, "x-y": {"z"}}
    assert owner_parse("capvco-x-y-z-0", legacy) is None
    assert owner_parse("capvco-x-y-z-0-gpu-0", legacy) is None


def test_cluster_names_that_begin_one_another_conflict_whichever_comes_first() -> None:
    assert cluster_name_conflict("x-y", ["x"]) == (
        "Cluster 'x' exists: VM names of cluster 'x-y' (capvco-x-y-...) "
        "could be read as names of cluster 'x'."
    )
    assert cluster_name_conflict("x", ["a", "x-y"]) == (
        "Cluster 'x-y' exists: VM names of cluster 'x-y' (capvco-x-y-...) "
        "could be read as names of cluster 'x'."
    )
    assert cluster_name_conflict("x", ["x"]) == "Cluster 'x' exists."


def test_cluster_names_that_only_share_letters_do_not_conflict() -> None:
    assert cluster_name_conflict("x", ["xy", "y-x", "x1"]) is None
    assert cluster_name_conflict("xy-z", ["x", "x-z", "xy-zz"]) is None


def test_pool_names_of_one_cluster_that_begin_one_another_conflict() -> None:
    assert pool_name_conflict("gpu-a100", ["gpu"], cluster="c") == (
        "Pool 'gpu' exists in cluster 'c': VM names of pool 'gpu-a100' "
        "(capvco-c-gpu-a100-...) could be read as names of pool 'gpu'."
    )
    assert pool_name_conflict("a", ["a-1"], cluster="c") is not None
    assert pool_name_conflict("a", ["a"], cluster="c") == "Pool 'a' exists in cluster 'c'."
    assert pool_name_conflict("a", ["ab", "b-a"], cluster="c") is None


def test_type_is_vendor_and_model_without_the_pci_address() -> None:
    assert gpu_type_of(CARDS[0]) == "NVIDIA A100"
    assert gpu_type_of(CARDS[4]) == "Dummy GPU"  # the model already names the vendor


@pytest.mark.parametrize("asked", ["NVIDIA A100", "nvidia  a100", "A100", "a100"])
def test_type_matches_exactly_or_by_contains_and_the_emptiest_card_wins(asked: str) -> None:
    assert gpu_profile_resolve(CARDS, location="nl", count=1, gpu_type=asked).profile_id == "a2"


def test_the_whole_count_must_fit_on_one_card() -> None:
    assert gpu_profile_resolve(CARDS, location="nl", count=3, gpu_type="A100").profile_id == "a2"
    with pytest.raises(GpuBusy) as refused:
        gpu_profile_resolve(CARDS, location="nl", count=4, gpu_type="A100")
    assert str(refused.value) == (
        "waiting for capacity: 6 free of NVIDIA A100 at nl, at most 3 on one card; "
        "a machine needs 4 on one card"
    )


def test_a_type_the_location_has_not_is_unavailable_naming_what_it_offers() -> None:
    with pytest.raises(GpuUnavailable) as refused:
        gpu_profile_resolve(CARDS, location="nl", count=1, gpu_type="H100")
    assert not isinstance(refused.value, GpuBusy)
    assert str(refused.value) == (
        "nl has no GPU type 'H100'. It offers: "
        "Dummy GPU: 2 free on 1 card(s), at most 2 on one card; "
        "NVIDIA A100: 6 free on 3 card(s), at most 3 on one card; "
        "NVIDIA L40S: 4 free on 1 card(s), at most 4 on one card."
    )


def test_a_pool_fits_in_principle_when_a_card_holds_its_count_in_all() -> None:
    totals = {"a1": 4, "a2": 4, "a3": 4, "l1": 4, "x1": 2}
    assert fit_refusal(CARDS, totals, location="nl", count=4, gpu_type="A100") is None
    refusal = fit_refusal(CARDS, totals, location="nl", count=5, gpu_type="A100")
    assert refusal is not None and refusal.field == "gpu_count"
    assert refusal.message == (
        "5 GPUs of type 'A100' on one machine can never fit in nl: a machine's GPUs share "
        "one card, and nl offers Dummy GPU (up to 2 per card), NVIDIA A100 (up to 4), "
        "NVIDIA L40S (up to 4)."
    )
    unknown = fit_refusal(CARDS, totals, location="nl", count=1, gpu_type="H100")
    assert unknown is not None and unknown.field == "gpu_type"
    assert fit_refusal([], {}, location="be", count=1, gpu_type="T4") == FitRefusal(
        "gpu_type", "GPU type 'T4' is not offered in be: be offers no GPUs."
    )


def test_profile_id_pins_one_card_even_when_others_are_emptier() -> None:
    card = gpu_profile_resolve(CARDS, location="nl", count=1, profile_id="a1")
    assert card.profile_id == "a1"


def test_exact_tier_wins_over_contains() -> None:
    cards = [Card("t", "NVIDIA", "T4 0000:01:00.0", 1), Card("tx", "NVIDIA", "T4X 0000:02:00.0", 4)]
    assert (
        gpu_profile_resolve(cards, location="be", count=1, gpu_type="NVIDIA T4").profile_id == "t"
    )
