"""Server time of a cluster's GPU use with a full window of samples: p50 and p95 of
`kube.gpu_use.gpu_use` (what the cluster page, the API and its CSV draw) and of the API
answer, with the queries of each.

Run (PostgreSQL; a throw-away test database ``test_<name>`` is created and dropped)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench_gpu_use \\
        .venv/bin/python tests/bench/bench_gpu_use.py [--gpus 64] [--runs 20]

The world: one cluster whose ``--gpus`` GPUs sit 8 to a node, each node a machine of one
pool, each GPU held by a pod of one of 4 namespaces; a full window of samples per GPU
(GPU_USE_WINDOW_HOURS at GPU_USE_READ_SECONDS: 288 at the defaults), the utilisation
varying. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from cloud.models import Account, Location  # noqa: E402
from clusters.models import Cluster, ClusterSite, Machine, MachinePool  # noqa: E402
from kube.gpu_use import gpu_use  # noqa: E402
from kube.models import GpuUseSample, GpuUseState, KubeNode  # noqa: E402
from tests.bench.support import postgresql_missing, throwaway_database  # noqa: E402

GPUS_PER_NODE = 8
NAMESPACES = 4


def seed(gpus: int) -> tuple[Cluster, int]:
    account = Account.objects.create(
        name="bench", customer_id="bench", api_url="https://api.bench.example/api/1",
        iam_url="https://iam.bench.example",
        credential="eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJiZW5jaCJ9.c2lnbmF0dXJl",
    )  # fmt: skip
    location = Location.objects.create(account=account, name="dc-01")
    cluster = Cluster.objects.create(name="bench", account=account)
    site = ClusterSite.objects.create(
        cluster=cluster, location=location, cloudspace_id="cs-1", image_id=1
    )
    nodes = (gpus + GPUS_PER_NODE - 1) // GPUS_PER_NODE
    pool = MachinePool.objects.create(
        cluster=cluster, site=site, name="gpu", replicas=nodes, gpu_type="H200", gpu_count=8
    )
    now = timezone.now()
    for n in range(nodes):
        machine = Machine.objects.create(
            pool=pool, name=f"gpu-{n}", index=n, vm_id=100 + n, phase=Machine.Phase.RUNNING
        )
        KubeNode.objects.create(
            cluster=cluster, name=f"node-{n}", uid=f"uid-{n}", machine=machine,
            gpu_capacity=GPUS_PER_NODE, first_seen_at=now, updated_at=now,
        )  # fmt: skip
    step = timedelta(seconds=settings.GPU_USE_READ_SECONDS)
    reads = int(timedelta(hours=settings.GPU_USE_WINDOW_HOURS) / step)
    rows = [
        GpuUseSample(
            cluster=cluster,
            node_name=f"node-{g // GPUS_PER_NODE}",
            gpu=g % GPUS_PER_NODE,
            uuid=f"GPU-{g:08}",
            model_name="NVIDIA H200",
            namespace=f"team-{g % NAMESPACES}",
            pod=f"job-{g}",
            utilisation=(g * 7 + r * 13) % 101,
            memory_used_mib=883,
            sampled_at=now - r * step,
        )
        for g in range(gpus)
        for r in range(reads)
    ]
    GpuUseSample.objects.bulk_create(rows, batch_size=5000)
    GpuUseState.objects.create(cluster=cluster, exporter="gpu-operator/x", looked_at=now)
    User.objects.create_superuser("bench", password="bench-password-1")
    return cluster, len(rows)


def timed(call: object, runs: int) -> tuple[float, float, int]:
    times = []
    queries = 0
    for _ in range(runs):
        with CaptureQueriesContext(connection) as captured:
            start = time.perf_counter()
            call()  # type: ignore[operator]
            times.append((time.perf_counter() - start) * 1000)
        queries = len(captured)
    times.sort()
    return statistics.median(times), times[max(0, round(0.95 * len(times)) - 1)], queries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    if postgresql_missing():
        return 2
    with throwaway_database():
        cluster, samples = seed(args.gpus)
        client = Client()
        client.force_login(User.objects.get(username="bench"))
        url = f"/api/v1/clusters/{cluster.pk}/gpu-use/"
        results = {
            "gpu_use": timed(lambda: gpu_use(cluster, now=timezone.now()), args.runs),
            "api": timed(lambda: client.get(url), args.runs),
        }
    print(f"{args.gpus} GPUs, {samples} samples in the window")
    print(f"{'what':10} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}")
    for what, (p50, p95, queries) in results.items():
        print(f"{what:10} {p50:8.1f} {p95:8.1f} {queries:8}")
    summary = {
        "gpus": args.gpus,
        "samples": samples,
        **{
            f"{what}_{key}": value
            for what, (p50, p95, queries) in results.items()
            for key, value in (("p50_ms", round(p50, 1)), ("p95_ms", round(p95, 1)),
                               ("queries", queries))
        },
    }  # fmt: skip
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
