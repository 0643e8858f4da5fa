"""Whether test messages to a slow receiver hold the web server: ``/healthz`` and another
account's API, answered alone and while ``--parallel`` test messages are asked for at once.

Run (PostgreSQL and Redis; a throw-away test database ``test_<name>`` is made and dropped,
the broker's keys carry this run's prefix in Redis database 15)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco_bench REDIS_URL=redis://127.0.0.1:6379 \\
        .venv/bin/python tests/bench/bench_notify_tests.py [--parallel 16] [--receiver-seconds 8] \\
        [--workers 2] [--threads 4] [--celery 2] [--port 18766]

It starts gunicorn as ``make run`` does (``--workers`` processes of ``--threads`` threads), a
Celery worker (``--celery`` processes, no beat) and a receiver that answers each post after
``--receiver-seconds``. Account A has ``--parallel`` webhook targets, all at that receiver;
account B a cluster, read through the API with B's own token.

First it asks ``/healthz`` and B's ``GET /api/v1/clusters/`` alone, one after the other,
for a few seconds; then it asks the same while A's admin presses "Send a test" on each of
A's targets at once (the page's htmx POSTs) and for as long as one receiver's answer takes.
The figure is the ratio of the two medians, per URL (1.0: unchanged). Also: how long the
POSTs took, how many were taken or refused (NOTIFY_TESTS_PER_ACCOUNT_MINUTE), how many a
worker posted (one at a time: the account's share of the worker's slots; one that waited
past 60 s is dropped) and when the last result was in. Exits 1 when a ratio is over
``--max-ratio`` (3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

import requests  # noqa: E402
from django.conf import settings  # noqa: E402
from django.test import Client  # noqa: E402

from capvco_web.tokens import api_token_create  # noqa: E402
from notify.models import Reason, WebhookTarget, WebhookTest  # noqa: E402
from notify.services import TEST_STALE  # noqa: E402
from tests.bench.support import (  # noqa: E402
    celery_worker,
    postgresql_missing,
    throwaway_database,
    verdict,
)
from tests.e2e.processes import ROOT, broker_flush, environment_for_subprocess  # noqa: E402
from tests.factories import AccountFactory, ClusterFactory, MembershipFactory  # noqa: E402
from tests.servers import free_port  # noqa: E402

CSRF = "b" * 32  # a cookie secret of our choosing, sent back as the header
MEASURE_ALONE_SECONDS = 4.0
EVERY = 0.1


class SlowReceiver:
    def __init__(self, seconds: float) -> None:
        self.posts = 0

        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                receiver.posts += 1
                time.sleep(seconds)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def gunicorn(port: int, workers: int, threads: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "capvco_web.wsgi", "--bind", f"127.0.0.1:{port}",
            "--workers", str(workers), "--threads", str(threads), "--no-control-socket",
            "--log-level", "warning", "--timeout", "120",
        ],
        cwd=ROOT,
        env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
            return process
        except requests.RequestException:
            time.sleep(0.2)
    process.terminate()
    raise RuntimeError("gunicorn did not start")


def sample(url: str, headers: dict[str, str], until: float) -> list[float]:
    """Seconds each GET of `url` took, one after the other, until `until`."""
    took = []
    with requests.Session() as session:
        while time.monotonic() < until:
            started = time.monotonic()
            answer = session.get(url, headers=headers, timeout=60)
            answer.raise_for_status()
            took.append(time.monotonic() - started)
            time.sleep(EVERY)
    return took


def figures(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    receiver = SlowReceiver(args.receiver_seconds)
    hosts = receiver.origin
    settings.NOTIFY_WEBHOOK_HOSTS = [hosts]
    a, b = AccountFactory(name="a"), AccountFactory(name="b")
    targets = [
        WebhookTarget.objects.create(
            account=a, name=f"ops-{n}", url=f"{receiver.origin}/hooks/{n}",
            reasons=[Reason.MACHINE_FAILED],
        )
        for n in range(args.parallel)
    ]  # fmt: skip
    admin = MembershipFactory(account=a, role="admin").user
    client = Client()
    client.force_login(admin)
    cookies = {"sessionid": client.cookies["sessionid"].value, "csrftoken": CSRF}
    ClusterFactory(account=b)
    _, token = api_token_create(
        user=MembershipFactory(account=b, role="viewer").user, name="bench", actor=admin
    )
    env = environment_for_subprocess(NOTIFY_WEBHOOK_HOSTS=hosts)
    base = f"http://127.0.0.1:{args.port}"
    urls = {
        "healthz": (f"{base}/healthz", {}),
        "other_account_api": (f"{base}/api/v1/clusters/", {"Authorization": f"Bearer {token}"}),
    }
    broker_flush()
    server = gunicorn(args.port, args.workers, args.threads, env)
    try:
        with celery_worker(
            [sys.executable, "-m", "celery"], folder, folder / "celery.log",
            slots=args.celery, env={"NOTIFY_WEBHOOK_HOSTS": hosts}, beat=False,
        ):  # fmt: skip
            alone = {}
            for name, (url, headers) in urls.items():
                sample(url, headers, time.monotonic() + 1)  # each process's first answer
                alone[name] = sample(url, headers, time.monotonic() + MEASURE_ALONE_SECONDS)
            posts: list[tuple[float, int, str]] = []

            def press(target: WebhookTarget) -> None:
                started = time.monotonic()
                answer = requests.post(
                    f"{base}/notifications/{target.pk}/test/",
                    cookies=cookies,
                    headers={"HX-Request": "true", "X-CSRFToken": CSRF, "Referer": base},
                    timeout=120,
                )
                posts.append((time.monotonic() - started, answer.status_code, answer.text))

            pressed = time.monotonic()
            until = pressed + args.receiver_seconds + 2
            with ThreadPoolExecutor(args.parallel + len(urls)) as pool:
                loaded = {
                    name: pool.submit(sample, url, headers, until)
                    for name, (url, headers) in urls.items()
                }
                for target in targets:
                    pool.submit(press, target)
                during = {name: future.result() for name, future in loaded.items()}
            taken = WebhookTest.objects.filter(target__account=a).count()
            # A test no worker took within TEST_EXPIRES is dropped, not posted.
            deadline = pressed + TEST_STALE.total_seconds()
            while (
                WebhookTest.objects.filter(target__account=a, done_at=None).exists()
                and time.monotonic() < deadline
            ):
                time.sleep(0.2)
            posted = WebhookTest.objects.filter(target__account=a).exclude(done_at=None)
            last = max(posted.values_list("done_at", flat=True), default=None)
            first = WebhookTest.objects.filter(target__account=a).order_by("requested_at").first()
            results_in = (last - first.requested_at).total_seconds() if last and first else 0.0
            posted_count = posted.count()
            errors = list(WebhookTest.objects.exclude(error="").values_list("error", flat=True))
    finally:
        server.terminate()
        server.wait(30)
        receiver.close()
    ratios = {
        name: round(statistics.median(during[name]) / statistics.median(alone[name]), 2)
        for name in urls
    }
    return {
        "parallel": args.parallel,
        "receiver_seconds": args.receiver_seconds,
        "server": f"gunicorn {args.workers} workers x {args.threads} threads",
        "celery": args.celery,
        "alone": {name: figures(values) for name, values in alone.items()},
        "during": {name: figures(values) for name, values in during.items()},
        "ratio_p50": ratios,
        "test_posts": figures([took for took, _, _ in posts]),
        "test_posts_status": sorted({status for _, status, _ in posts}),
        "tests_taken": taken,
        "tests_refused": sum("NOTIFY_TESTS_PER_ACCOUNT_MINUTE" in text for _, _, text in posts),
        "tests_posted": posted_count,
        "last_result_in_s": round(results_in, 1),
        "receiver_posts": receiver.posts,
        "test_errors": errors[:3],
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--receiver-seconds", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=2)  # bin/run
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--celery", type=int, default=2)
    parser.add_argument("--port", type=int, default=0, help="gunicorn's port (0: a free one)")
    parser.add_argument("--max-ratio", type=float, default=3.0)
    args = parser.parse_args()
    args.port = args.port or free_port()
    if postgresql_missing():
        return 2
    with throwaway_database(), tempfile.TemporaryDirectory() as folder:
        summary = run(args, Path(folder))
    ok = all(ratio <= args.max_ratio for ratio in summary["ratio_p50"].values())
    for name in ("alone", "during", "ratio_p50", "test_posts", "tests_taken", "tests_refused",
                 "tests_posted", "last_result_in_s", "load_average"):  # fmt: skip
        print(f"{name:14} {summary[name]}")
    print(f"verdict        {verdict(ok)} (each ratio at most {args.max_ratio})")
    print(json.dumps(summary, separators=(",", ":")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
