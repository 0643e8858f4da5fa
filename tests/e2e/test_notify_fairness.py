"""One account whose webhook receivers never answer holds no other account's alerts back:
a real Celery worker at `make run`'s concurrency posts to real receivers over HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from clusters.models import Machine
from notify import tasks
from notify.models import Reason, WebhookTarget
from tests.e2e.processes import broker_flush, celery_worker
from tests.factories import MachineFactory

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
MAKE_RUN_WORKER = ("--pool", "prefork", "--concurrency", "2")
# Well below one unanswered post (5 s to connect, 10 s for an answer) times the slow
# account's targets: the healthy account is told while the slow one still waits.
HEALTHY_WITHIN = 15.0


class Receiver:
    """Counts the posts to it; `hang` holds each one unanswered until the receiver stops."""

    def __init__(self, *, hang: bool) -> None:
        self.posts: list[str] = []
        self.stop = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                receiver.posts.append(self.path)
                if hang:
                    receiver.stop.wait(60)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers(settings: Any) -> Iterator[tuple[Receiver, Receiver]]:
    slow, healthy = Receiver(hang=True), Receiver(hang=False)
    settings.NOTIFY_WEBHOOK_HOSTS = [slow.origin, healthy.origin]
    yield slow, healthy
    slow.close()
    healthy.close()


def _account_with_targets(receiver: Receiver, targets: int) -> Any:
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    account = machine.pool.cluster.account
    for n in range(targets):
        WebhookTarget.objects.create(
            account=account, name=f"ops-{n}", url=f"{receiver.origin}/hooks/{n}",
            reasons=[Reason.MACHINE_FAILED],
        )  # fmt: skip
    return account


def test_an_account_whose_receivers_never_answer_holds_no_other_account_back(
    tmp_path: Path, receivers: tuple[Receiver, Receiver], require_postgres: None
) -> None:
    slow, healthy = receivers
    # First in line: its notices are the oldest, and it has five targets that never answer.
    _account_with_targets(slow, 5)
    _account_with_targets(healthy, 1)
    broker_flush()
    log = tmp_path / "celery.log"
    hosts = f"{slow.origin},{healthy.origin}"

    with celery_worker(tmp_path, *MAKE_RUN_WORKER, beat=False, NOTIFY_WEBHOOK_HOSTS=hosts):
        deadline = time.monotonic() + 60
        while " ready." not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.2)
        tasks.notify_pass.delay()  # beat's tick
        sent = time.monotonic()
        while not healthy.posts and time.monotonic() - sent < 60:
            time.sleep(0.1)
        took = time.monotonic() - sent
        while not slow.posts and time.monotonic() - sent < HEALTHY_WITHIN:
            time.sleep(0.1)
        slow_posts = len(slow.posts)

    assert healthy.posts == ["/hooks/0"], log.read_text()[-4000:]
    assert took < HEALTHY_WITHIN, f"the healthy account was told after {took:.1f} s"
    assert slow_posts >= 1  # the slow account's pass is under way too
    print(f"the healthy account was told {took:.1f} s after the tick")
