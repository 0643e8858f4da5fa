"""The verification pod's nvidia-smi output, read as a real node prints it, and the verdict
held against what is billed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpus.probe import COMMAND, GpuSeen, ProbeError, Verdict, driver_at_least, judge, parse_query

GPU_NODE = Path(__file__).resolve().parents[2] / ".." / "shared" / "gpu-node"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The recording's header-less query (its README): no MIG mode column.
NOHEADER_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "driver_version",
    "memory.total",
    "compute_cap",
)

H200 = GpuSeen(
    index=0,
    name="NVIDIA H200",
    uuid="GPU-a54cc8e3-5c0b-336d-1a96-de062f90b427",
    pci_bus_id="00000000:00:06.0",
    driver_version="580.159.04",
    memory_mib=143771,
    mig_mode="Disabled",
    compute_cap="9.0",
)


def _a100(index: int, name: str = "NVIDIA A100-SXM4-80GB", driver: str = "550.54.15") -> GpuSeen:
    return GpuSeen(index=index, name=name, driver_version=driver)


def test_the_command_queries_the_columns_the_parser_reads_without_header_or_units() -> None:
    assert COMMAND == (
        "nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,"
        "mig.mode.current,compute_cap --format=csv,noheader,nounits"
    )


def test_the_h200_recording_with_header_and_units_reads_field_by_field() -> None:
    # 14 columns, units in the header and the values ("143771 MiB"): read by the header.
    assert parse_query((GPU_NODE / "query-gpu.csv").read_text()) == (H200,)


def test_the_h200_recording_without_header_reads_field_by_field() -> None:
    seen = parse_query((GPU_NODE / "query-gpu-noheader.csv").read_text(), NOHEADER_FIELDS)
    assert seen == (replace(H200, mig_mode=None),)


def test_the_probes_own_output_with_na_and_trailing_spaces_reads() -> None:
    text = (
        "0, NVIDIA H200, GPU-a54cc8e3-5c0b-336d-1a96-de062f90b427, 00000000:00:06.0, "
        "580.159.04, 143771, Disabled, 9.0 \n"
        "1, NVIDIA H200, [N/A], 00000000:00:07.0, 580.159.04, [Not Supported], [N/A], 9.0\n\n"
    )
    first, second = parse_query(text)
    assert first == H200
    assert second == GpuSeen(
        index=1,
        name="NVIDIA H200",
        pci_bus_id="00000000:00:07.0",
        driver_version="580.159.04",
        compute_cap="9.0",
    )


def test_a_vgpu_guests_output_reads_and_is_verified_as_its_cards_type() -> None:
    seen = parse_query((FIXTURES / "vgpu-guest-a100d-20c.csv").read_text())
    assert [(g.index, g.name, g.memory_mib, g.mig_mode) for g in seen] == [
        (0, "GRID A100D-20C", 20480, None),
        (1, "GRID A100D-20C", 20480, None),
    ]
    assert judge(seen, "NVIDIA A100", 2, "535.104.05") == Verdict("verified")
    (h100,) = parse_query((FIXTURES / "vgpu-guest-h100xm-80c.csv").read_text())
    assert (h100.name, h100.driver_version, h100.mig_mode) == (
        "NVIDIA H100XM-80C",
        "535.104.05",
        None,
    )
    assert judge((h100,), "NVIDIA H100", 1, "535.104.05") == Verdict("verified")


def test_no_output_is_no_gpu() -> None:
    assert parse_query("") == ()
    assert judge((), "NVIDIA A100", 1, "") == Verdict(
        "mismatch", ("billed NVIDIA A100 x 1, the node sees no GPU",)
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            "line 1 has 1 values, not 8: \"NVIDIA-SMI has failed because it couldn't",
        ),
        ("No devices were found", "line 1 has 1 values, not 8: 'No devices were found'"),
        (
            "0, NVIDIA H200, u, b, 580.1, 1, Disabled, 9.0\n"
            "x, NVIDIA H200, u, b, 580.1, 1, Disabled, 9.0",
            "line 2: the index is not a number: 'x, NVIDIA H200",
        ),
        (
            "0, [N/A], u, b, 580.1, 1, Disabled, 9.0",
            "line 1: the GPU has no name",
        ),
        (
            "0, NVIDIA H200, u, b, 580.1, lots, Disabled, 9.0",
            "line 1: memory.total 'lots' is not a number of MiB",
        ),
        (
            "0, NVIDIA H200, u, b, ERR!, 1, Disabled, 9.0",
            "line 1: driver_version 'ERR!' is not a version",
        ),
    ],
)
def test_garbage_is_refused_naming_its_line(text: str, message: str) -> None:
    with pytest.raises(ProbeError) as refused:
        parse_query(text)
    assert message in str(refused.value)


def test_a_query_without_index_or_name_is_refused() -> None:
    with pytest.raises(ProbeError, match="the query has no 'index' column: name, uuid"):
        parse_query("NVIDIA H200, u", ("name", "uuid"))


def test_driver_versions_compare_number_by_number() -> None:
    assert driver_at_least("550.54.15", "535.104.05")
    assert driver_at_least("535.104.05", "535.104.05")
    assert driver_at_least("535.104.10", "535.104.05")
    assert not driver_at_least("535.54.03", "535.104.05")  # as text, "54" > "104"
    assert not driver_at_least("525.60.13", "535.104.05")
    with pytest.raises(ValueError, match="'r535' is not a driver version"):
        driver_at_least("550.54.15", "r535")


def test_what_is_billed_is_verified() -> None:
    seen = (_a100(0), _a100(1))
    assert judge(seen, "NVIDIA A100", 2, "535.104.05") == Verdict("verified")
    assert judge(seen, "NVIDIA A100 80GB", 2, "") == Verdict("verified")


def test_another_model_is_a_mismatch_with_both_sides() -> None:
    seen = (GpuSeen(index=0, name="NVIDIA A10", driver_version="550.54.15"),)
    assert judge(seen, "NVIDIA A100", 1, "") == Verdict(
        "mismatch", ("billed NVIDIA A100 x 1, the node sees 1 x NVIDIA A10",)
    )


def test_fewer_gpus_than_billed_is_a_mismatch() -> None:
    assert judge((_a100(0),), "NVIDIA A100", 2, "") == Verdict(
        "mismatch", ("billed NVIDIA A100 x 2, the node sees 1 x NVIDIA A100-SXM4-80GB",)
    )
    mixed = (_a100(0), GpuSeen(index=1, name="NVIDIA A10"), _a100(2))
    assert judge(mixed, "NVIDIA A100", 3, "").reasons == (
        "billed NVIDIA A100 x 3, the node sees 2 x NVIDIA A100-SXM4-80GB, 1 x NVIDIA A10",
    )


def test_an_old_or_unknown_driver_is_a_mismatch_each_said_once() -> None:
    seen = (_a100(0, driver="525.60.13"), _a100(1, driver="525.60.13"))
    assert judge(seen, "NVIDIA A100", 2, "535.104.05") == Verdict(
        "mismatch", ("driver 525.60.13 is older than the pool's 535.104.05",)
    )
    unknown = (GpuSeen(index=0, name="NVIDIA A100-SXM4-80GB"),)
    assert judge(unknown, "NVIDIA A100", 1, "535.104.05").reasons == (
        "the driver's version is not shown; the pool's is 535.104.05",
    )
    # No driver asked for: any driver will do.
    assert judge(seen, "NVIDIA A100", 2, "") == Verdict("verified")


def test_model_count_and_driver_are_all_said() -> None:
    seen = (GpuSeen(index=0, name="NVIDIA L4", driver_version="525.60.13"),)
    assert judge(seen, "NVIDIA L40S", 2, "535.104.05").reasons == (
        "billed NVIDIA L40S x 2, the node sees 1 x NVIDIA L4",
        "driver 525.60.13 is older than the pool's 535.104.05",
    )


def test_a_pod_that_did_not_run_fails_with_its_reason() -> None:
    assert Verdict.failed("image not pulled") == Verdict("failed", ("image not pulled",))
