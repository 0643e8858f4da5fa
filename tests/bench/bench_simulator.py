"""How fast the whitesky simulator lists a big world.

Run: ``.venv/bin/python tests/bench/bench_simulator.py [--vgpus 10000] [--vms 2000]``

Seeds the reservations and VMs through the control API (POST /_sim/seed), then measures
requests per second over one kept-alive connection for the vGPU list (pages of 500, and
limit=0) and the VM list, and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.whitesky_sim import WhiteskySimulator

LOCATION = "bench-loc-001"
CLOUDSPACE = "cs-bench"


def bench_world(vgpus: int) -> dict[str, object]:
    cards = 10
    return {
        "customer": {"customer_id": "cust-bench", "name": "Bench"},
        "currency": "EUR",
        "locations": [
            {
                "name": LOCATION,
                "prices": {"vgu": 300.0},
                "gpu_cards": [
                    {
                        "vendor": "NVIDIA",
                        "model": "A100",
                        "cards": cards,
                        "instances_per_card": -(-vgpus // cards),
                    }
                ],
                "external_networks": [
                    {"external_network_id": 1, "cidr": "10.70.0.0/24", "gateway": "10.70.0.1"}
                ],
                "images": [{"image_id": 1, "name": "Ubuntu 24.04"}],
                "cloudspaces": [
                    {
                        "cloudspace_id": CLOUDSPACE,
                        "name": "bench",
                        "private_network": "10.128.0.0/16",
                    }
                ],
            }
        ],
    }


def measure(label: str, request: Callable[[], int], seconds: float) -> tuple[str, int, float, int]:
    """Repeat ``request`` (one request, answering its size in bytes) for ``seconds``."""
    made = 0
    size = 0
    started = time.perf_counter()
    while made == 0 or time.perf_counter() - started < seconds:
        size = request()
        made += 1
    return label, made, time.perf_counter() - started, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vgpus", type=int, default=10_000)
    parser.add_argument("--vms", type=int, default=2_000)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    args = parser.parse_args()

    with WhiteskySimulator() as sim:
        sim.reset(bench_world(args.vgpus))
        started = time.perf_counter()
        sim.seed(CLOUDSPACE, vms=args.vms, vgpus=args.vgpus)
        seeding = time.perf_counter() - started
        print(f"seeded {args.vgpus} reservations and {args.vms} VMs in {seeding:.2f} s")

        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {sim.token()}"
        vgpus_url = f"{sim.api_url}/customers/cust-bench/locations/{LOCATION}/vgpus"
        vms_url = f"{sim.api_url}/customers/cust-bench/cloudspaces/{CLOUDSPACE}/vms"

        def get(url: str, **params: object) -> int:
            response = session.get(url, params=params, timeout=60)
            response.raise_for_status()
            return len(response.content)

        page_offsets = list(range(0, args.vgpus, 500))
        pages_left: list[int] = []

        def next_page() -> int:
            if not pages_left:
                pages_left.extend(page_offsets)
            return get(vgpus_url, limit=500, start_after=pages_left.pop(0))

        def all_vgpus() -> int:
            return get(vgpus_url, limit=0)

        def cold(request: Callable[[], int]) -> Callable[[], int]:
            def changed_then_request() -> int:
                session.post(f"{sim.base_url}/_sim/config", json={"switches": {}}, timeout=60)
                return request()

            return changed_then_request

        # The first full listing also checks the pages add up.
        seen = sum(
            len(
                session.get(vgpus_url, params={"limit": 500, "start_after": o}, timeout=60).json()[
                    "data"
                ]
            )
            for o in page_offsets
        )
        assert seen == args.vgpus, f"pages hold {seen} reservations, not {args.vgpus}"

        rows = [
            measure("GET /me (baseline)", lambda: get(f"{sim.api_url}/me"), args.seconds),
            measure("vGPU list, limit=500 (one page)", next_page, args.seconds),
            measure(
                f"vGPU list, limit=0 ({args.vgpus} items)",
                lambda: get(vgpus_url, limit=0),
                args.seconds,
            ),
            measure(f"VM list ({args.vms} VMs)", lambda: get(vms_url), args.seconds),
            # Any change empties the answer caches; an empty config change is one.
            measure("vGPU list, limit=500, after a change", cold(next_page), args.seconds),
            measure("vGPU list, limit=0, after a change", cold(all_vgpus), args.seconds),
            measure("VM list, after a change", cold(lambda: get(vms_url)), args.seconds),
        ]

    print()
    print(f"{'request':<40} {'requests':>8} {'req/s':>9} {'ms/req':>8} {'KiB/answer':>11}")
    for label, made, elapsed, size in rows:
        print(
            f"{label:<40} {made:>8} {made / elapsed:>9.1f} {1000 * elapsed / made:>8.2f} "
            f"{size / 1024:>11.1f}"
        )
    full_listing = next(r for r in rows if r[0].startswith("vGPU list, limit=500"))
    full_listing_ms = 1000 * full_listing[2] / full_listing[1] * len(page_offsets)
    print(
        f"\na full paged listing ({len(page_offsets)} pages of 500): about {full_listing_ms:.0f} ms"
    )
    baseline_ms = 1000 * rows[0][2] / rows[0][1]
    summary = {
        "vgpus": args.vgpus,
        "vms": args.vms,
        "requests": {
            label: {
                "ms": round(1000 * elapsed / made, 3),
                "per_baseline": round(1000 * elapsed / made / baseline_ms, 2),
                "kib": round(size / 1024, 1),
            }
            for label, made, elapsed, size in rows
        },
        "full_paged_listing_ms": round(full_listing_ms, 1),
    }
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
