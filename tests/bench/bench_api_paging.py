"""The API's reservation list over a large history, paged by offset and by cursor: SQL
queries, SQL time (per request, the mean) and request time of the first page and of a deep one.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench \\
        .venv/bin/python tests/bench/bench_api_paging.py [--reservations 100000] [--runs 20]

The world: ``--reservations`` vGPU reservations (bulk-created, released history over 10
locations of one account). Pages of 100 are asked for by a superuser through DRF's test
client (the whole request: authentication, filters, queries, serialization; no network):
the first page and the ``--deep``-th (the 1,000th by default: rows 99,901 to 100,000),
once with the offset paging the list had (``limit``/``offset``, ordered by location and
name, ``COUNT(*)`` over every row) and once with its cursor paging (``cursor``, in id
order, the count stopping at 10,000). The deep cursor is reached by walking the ``next``
links, as a caller would.

Wall times depend on what else runs on the machine (the load average is printed). Prints a
table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from capvco_web.api_input import CursorPagination, Pagination  # noqa: E402
from cloud.models import Account, Location  # noqa: E402
from clusters.api.views import VgpuReservationViewSet  # noqa: E402
from gpus.models import VgpuReservation  # noqa: E402

LOCATIONS = 10
PAGE = 100
BATCH = 5000
LIST = "/api/v1/reservations/"


def seed(reservations: int) -> None:
    now = timezone.now()
    account = Account.objects.create(
        name="bench", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="bench", credential="x.y.z",
    )  # fmt: skip
    locations = Location.objects.bulk_create(
        Location(account=account, name=f"bench{i:02d}-dc01-001", currency="EUR",
                 vgu_price=Decimal("300"), observation_complete=True)
        for i in range(LOCATIONS)
    )  # fmt: skip
    VgpuReservation.objects.bulk_create(
        (
            VgpuReservation(
                location=locations[i % LOCATIONS], name=f"capvco-c{i % 50:02d}-p0-{i}-gpu-0",
                vgpu_id=f"old-{i}", gpu_id="card-1", state=VgpuReservation.State.RELEASED,
                owner_cluster=f"c{i % 50:02d}", owner_machine=f"p0-{i}", owner_index=0,
                released_at=now - timedelta(minutes=i),
            )
            for i in range(reservations)
        ),
        batch_size=BATCH,
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def _query(link: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(link).query).items()}


def deep_cursor(api: APIClient, deep: int) -> dict[str, str]:
    """The query of the `deep`-th page of PAGE rows, walked to by `next` links (in pages
    of 1,000, then of PAGE: a cursor does not depend on the page size)."""
    skip, params = (deep - 1) * PAGE, {"limit": "1000"}
    while skip:
        params["limit"] = str(1000 if skip >= 1000 else PAGE)
        response = api.get(LIST, params)
        assert response.status_code == 200, response.content
        skip -= int(params["limit"])
        params = {**_query(response.json()["next"]), "limit": params["limit"]}
    return {"cursor": params["cursor"], "limit": str(PAGE)}


def measure(api: APIClient, params: dict[str, str], runs: int) -> dict[str, Any]:
    for _ in range(3):  # warm: the first asks read cold pages
        api.get(LIST, params)
    times = []
    with CaptureQueriesContext(connection) as queries:
        for _ in range(runs):
            start = time.perf_counter()
            response = api.get(LIST, params)
            times.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, response.content
            assert len(response.json()["results"]) == PAGE
    body = response.json()
    sql_ms = sum(float(q["time"]) for q in queries.captured_queries) * 1000 / runs
    return {
        "p50_ms": round(statistics.median(times), 1),
        "max_ms": round(max(times), 1),
        "sql_ms": round(sql_ms, 1),
        "queries": len(queries) // runs,
        "first_id": body["results"][0]["id"],
        "count": body["count"],
    }


def run(reservations: int, runs: int, deep: int) -> dict[str, Any]:
    started = time.perf_counter()
    seed(reservations)
    print(f"seeded {VgpuReservation.objects.count()} reservations in "
          f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    api = APIClient()
    api.force_authenticate(User.objects.create_superuser("bench", password="bench-pass-1"))
    results: dict[str, dict[str, Any]] = {}
    view: Any = VgpuReservationViewSet  # offset pages first: the paging the list had
    try:
        view.pagination_class = Pagination
        results["offset, first page"] = measure(api, {"limit": str(PAGE)}, runs)
        deep_offset = {"limit": str(PAGE), "offset": str((deep - 1) * PAGE)}
        results[f"offset, page {deep:,}"] = measure(api, deep_offset, runs)
    finally:
        view.pagination_class = CursorPagination
    results["cursor, first page"] = measure(api, {"limit": str(PAGE)}, runs)
    results[f"cursor, page {deep:,}"] = measure(api, deep_cursor(api, deep), runs)
    load = os.getloadavg()[0]
    print(f"\nload average (1 min) at the end: {load:.1f} on {os.cpu_count()} CPUs")
    print(f"{'page of ' + str(PAGE):24} {'p50 ms':>7} {'max ms':>7} {'SQL ms':>7} {'queries':>7}")
    for name, r in results.items():
        print(
            f"{name:24} {r['p50_ms']:7.1f} {r['max_ms']:7.1f} {r['sql_ms']:7.1f} {r['queries']:7d}"
        )
    offset_first, offset_deep, cursor_first, cursor_deep = results.values()
    ratios = {
        "offset deep/first p50": offset_deep["p50_ms"] / offset_first["p50_ms"],
        "cursor deep/first p50": cursor_deep["p50_ms"] / cursor_first["p50_ms"],
        "deep offset/cursor p50": offset_deep["p50_ms"] / cursor_deep["p50_ms"],
        "deep offset/cursor SQL": offset_deep["sql_ms"] / max(cursor_deep["sql_ms"], 0.1),
    }
    for name, ratio in ratios.items():
        print(f"{name:24} {ratio:7.2f}")
    return {
        "reservations": reservations, "runs": runs, "page_size": PAGE, "deep_page": deep,
        "load_average": load, "pages": results,
        "ratios": {name: round(ratio, 2) for name, ratio in ratios.items()},
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reservations", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20, help="requests per page")
    parser.add_argument("--deep", type=int, default=1000, help="the deep page's number")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        print("set DATABASE_URL to a PostgreSQL server (a test database is made beside it)")
        return 2
    if args.deep * PAGE > args.reservations:
        print(f"--deep {args.deep} is past the last page of {args.reservations} reservations")
        return 2
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        summary = run(args.reservations, args.runs, args.deep)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
