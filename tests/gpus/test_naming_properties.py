"""Owner names, for any cluster and pool names the model accepts: every name we make reads
back as exactly its owner and never as another's; anything else is nobody's or not ours."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from clusters.models import dns_label
from gpus.naming import (
    NOBODY,
    PREFIX,
    Owner,
    cluster_name_conflict,
    owner_parse,
    pool_name_conflict,
    vgpu_name,
    vm_name,
)

Clusters = dict[str, list[str]]

# Deterministic (same examples on every run, nothing stored), and cheap: no database.
naming_settings = settings(max_examples=200, derandomize=True, database=None, deadline=None)

# Few short words, so that names often begin one another: the cases the rules are for;
# and any DNS label over a few letters (dashes anywhere inside, doubled ones too).
WORDS = st.sampled_from(["a", "b", "gpu", "0"])
LETTERS = "abgpux019"
labels = st.one_of(
    st.lists(WORDS, min_size=1, max_size=3).map("-".join),
    st.lists(WORDS, min_size=1, max_size=3).map("-".join),
    st.sampled_from(LETTERS),
    st.tuples(
        st.sampled_from(LETTERS),
        st.text(alphabet=LETTERS + "-", max_size=8),
        st.sampled_from(LETTERS),
    ).map("".join),
)
machine_indexes = st.integers(min_value=0, max_value=32767)
gpu_indexes = st.integers(min_value=0, max_value=7)


@st.composite
def valid_clusters(draw: st.DrawFn) -> Clusters:
    """Clusters with their pools, each name kept only when the model's rule accepts it."""
    clusters: Clusters = {}
    for cluster in draw(st.lists(labels, max_size=8)):
        if cluster_name_conflict(cluster, clusters) is not None:
            continue
        pools: list[str] = []
        for pool in draw(st.lists(labels, max_size=5)):
            if pool_name_conflict(pool, pools, cluster=cluster) is None:
                pools.append(pool)
        clusters[cluster] = pools
    for name in [*clusters, *(p for pools in clusters.values() for p in pools)]:
        dns_label(name)  # what the model's field accepts
    return clusters


def machines_of(clusters: Clusters) -> list[tuple[str, str]]:
    return [(cluster, pool) for cluster, pools in clusters.items() for pool in pools]


@naming_settings
@given(clusters=valid_clusters(), data=st.data())
def test_every_vm_and_vgpu_name_we_make_parses_back_to_exactly_its_owner(
    clusters: Clusters, data: st.DataObject
) -> None:
    for cluster, pool in machines_of(clusters):
        index, gpu = data.draw(machine_indexes), data.draw(gpu_indexes)
        machine = f"{pool}-{index}"

        assert owner_parse(vm_name(cluster, machine), clusters) == Owner(
            cluster=cluster, machine=machine, index=None, pool=pool, machine_index=index
        )
        assert owner_parse(vgpu_name(cluster, machine, gpu), clusters) == Owner(
            cluster=cluster, machine=machine, index=gpu, pool=pool, machine_index=index
        )


@naming_settings
@given(clusters=valid_clusters(), pool=labels, index=machine_indexes, gpu=st.none() | gpu_indexes)
def test_no_name_made_for_one_cluster_parses_to_another(
    clusters: Clusters, pool: str, index: int, gpu: int | None
) -> None:
    # Any pool, even one the cluster does not have (deleted, or never valid there).
    for cluster, pools in clusters.items():
        machine = f"{pool}-{index}"
        name = vm_name(cluster, machine) if gpu is None else vgpu_name(cluster, machine, gpu)

        owner = owner_parse(name, clusters)

        assert owner is not None
        assert owner.cluster in (cluster, "")
        if pool in pools:
            assert (owner.cluster, owner.pool, owner.machine) == (cluster, pool, machine)
        elif pool_name_conflict(pool, pools, cluster=cluster) is None:
            assert owner == NOBODY  # a deleted pool: none of the others claims its names


@naming_settings
@given(clusters=valid_clusters(), gone=labels, pool=labels, index=machine_indexes)
def test_names_of_a_cluster_we_do_not_know_are_owned_by_nobody(
    clusters: Clusters, gone: str, pool: str, index: int
) -> None:
    # A deleted cluster, or one of another account: valid next to the known ones.
    if cluster_name_conflict(gone, clusters) is not None:
        return
    assert owner_parse(vm_name(gone, f"{pool}-{index}"), clusters) == NOBODY
    assert owner_parse(vgpu_name(gone, f"{pool}-{index}", 0), clusters) == NOBODY


@naming_settings
@given(clusters=valid_clusters(), name=st.text())
def test_a_name_without_our_prefix_is_not_ours(clusters: Clusters, name: str) -> None:
    if name.startswith(PREFIX):
        return
    assert owner_parse(name, clusters) is None


# Pieces our names are made of, and near misses, so that many strings come close to parsing.
PIECES = ["-", "-gpu-", "gpu", "0", "1", "01", "9" * 12, "\u0661", " ", "\n"]
NUMBERS = st.sampled_from(["0", "7", "10", "01", "00", "9" * 12, "\u0661", "", "x", "1 "])


def near_names(clusters: Clusters) -> st.SearchStrategy[str]:
    pools = [p for names in clusters.values() for p in names]
    pieces = st.sampled_from(PIECES + list(clusters) + pools)

    def part(known: list[str]) -> st.SearchStrategy[str]:
        garbled = st.lists(pieces, max_size=4).map("".join)
        return st.sampled_from(known) | garbled if known else garbled

    def joined(c: str, p: str, n: str, gpu: str | None, end: str) -> str:
        return f"{PREFIX}{c}-{p}-{n}" + (f"-gpu-{gpu}" if gpu is not None else "") + end

    shaped = st.builds(
        joined, part(list(clusters)), part(pools), NUMBERS, st.none() | NUMBERS,
        st.sampled_from(["", "", "", "-", "\n", "-gpu"]),
    )  # fmt: skip
    loose = st.lists(pieces, max_size=10).map(lambda drawn: PREFIX + "".join(drawn))
    return st.one_of(shaped, shaped, shaped, loose)


@naming_settings
@given(clusters=valid_clusters(), data=st.data())
def test_any_string_parses_without_raising_and_only_a_name_we_make_gets_an_owner(
    clusters: Clusters, data: st.DataObject
) -> None:
    name = data.draw(st.one_of(st.text(), near_names(clusters), near_names(clusters)))

    owner = owner_parse(name, clusters)

    if owner is not None and owner.cluster:
        made = (
            vm_name(owner.cluster, owner.machine)
            if owner.index is None
            else vgpu_name(owner.cluster, owner.machine, owner.index)
        )
        assert made == name
        assert owner.pool in clusters[owner.cluster]
        assert owner.machine == f"{owner.pool}-{owner.machine_index}"
