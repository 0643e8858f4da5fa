"""Keep every observed cluster's nodes and pods current by list + watch (kube.watch).

    manage.py kube_watch    runs until SIGTERM or SIGINT, then stops its watches, clears
                            their stamps (the beat pass lists those clusters again at its
                            next tick) and exits 0

Run exactly one: two would both list and watch every cluster (harmless, twice the cost).
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand

from kube.watch import KubeWatchProcess


class Command(BaseCommand):
    help = "Keep every observed cluster's nodes and pods current by list + watch."

    def handle(self, *args: Any, **options: Any) -> None:
        process = KubeWatchProcess()

        def stop(signum: int, frame: FrameType | None) -> None:
            process.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        process.run()
