"""The watch process (`manage.py kube_watch`): each workload cluster's nodes and pods kept
current by list + watch, instead of a full listing on every beat tick.

One thread per cluster and kind (nodes, pods). Each lists (paged) and mirrors the listing
with the beat pass's own rules (kube.observe: `nodes_sync`, `pods_sync`), then
watches from the listing's resourceVersion with bookmarks: one request of
WATCH_TIMEOUT_SECONDS after another, each from the resourceVersion the last event or
bookmark carried (kept here: bookmarks move it). Every event writes its one row
(kube.events). Each write holds the cluster's row (FOR KEY SHARE): a cluster being deleted
is waited for, and one deleted ends its threads with nothing written.

Gone is decided only from a complete, current view. A DELETED event deletes its row: that
is valid because the chain of watch requests is unbroken since a complete listing (each
begins where the last one ended, and the server answers every event since, or 410). Any
break ends the chain: 410 Gone (an HTTP 410, or an ERROR event with code 410: the
resourceVersion was compacted away), a request that failed, an event that could not be
read or written. After a break only a fresh complete listing decides: the thread lists
again (at once after a 410, else after its back-off) and mirrors that listing, which
removes what was deleted while the watch was broken, and nothing before. Every
KUBE_RESYNC_SECONDS it lists again anyway, for safety.

A healthy thread stamps its KubeWatch row (the time its view was last known whole and
current) at most every STAMP_EVERY_SECONDS, and at least at the end of each watch
request; the beat pass does not list a kind whose stamp is fresh (younger than two
watch requests), so the two never both list it. A thread that fails, or stops, clears
its stamp (the beat pass lists again at its next tick; after a 410 it keeps it while it
lists again at once); a process that died leaves stamps that go stale by themselves.

The process reads the cluster table every POLL_SECONDS: a new cluster gets its threads,
a removed one (deleting, or its kubeconfig removed) loses them, and a changed kubeconfig
restarts them. A thread that fails backs off exponentially (BACKOFF_SECONDS doubled per
failure in a row, at most BACKOFF_MAX_SECONDS) and logs one line per change of its
error: the error as the client words it, never the kubeconfig.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from capvco_web.backoff import backoff_seconds
from capvco_web.integrations import kube
from capvco_web.integrations.kube.client import KubeClient, WatchStream
from capvco_web.rows import rows_key_share
from clusters.models import Cluster
from clusters.selectors import kube_observed
from kube.client import kube_client
from kube.events import (
    kube_watch_stamp,
    kube_watch_unstamp,
    node_event_apply,
    pod_event_apply,
)
from kube.models import KubeWatch
from kube.observe import nodes_sync, pods_sync

logger = logging.getLogger(__name__)

KINDS = (KubeWatch.Kind.NODES, KubeWatch.Kind.PODS)
POLL_SECONDS = 5.0
BACKOFF_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 300.0
STOP_SECONDS = 10.0  # how long a stop waits for the threads to end
# A watch request the server ends sooner than this (no event in it) is not sent again at
# once: a server that closes every watch must not get one per millisecond.
SHORTEST_WATCH_SECONDS = 1.0


class _Relist(Exception):
    """The watch is broken by a 410: list again, at once."""


class KubeWatcher(threading.Thread):
    """One cluster's nodes or pods: list, mirror, watch; again after a break or resync."""

    def __init__(
        self, *, cluster_id: int, cluster_name: str, kind: str, kubeconfig_digest: str = ""
    ) -> None:
        super().__init__(name=f"kube-watch-{cluster_name}-{kind}", daemon=True)
        self.cluster_id = cluster_id
        self.cluster_name = cluster_name
        self.kind = kind
        self.kubeconfig_digest = kubeconfig_digest
        self.stopping = threading.Event()
        self._stream: WatchStream[Any] | None = None
        self._stamped: datetime | None = None
        self._stamped_clock = 0.0
        self._listed_clock = 0.0
        self._error = ""
        self.failures = 0
        """Failures in a row: the back-off doubles with each."""

    def __repr__(self) -> str:
        return f"KubeWatcher({self.cluster_name}/{self.kind})"

    def stop(self) -> None:
        """Ask it to end (from any thread): a watch request in flight is cut at once."""
        self.stopping.set()
        stream = self._stream
        if stream is not None:
            stream.stop()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    self._list_and_watch()
                except _Relist:
                    logger.info("watch %s of %s: expired (410), listing again", *self._what())
                    if time.monotonic() - self._listed_clock < SHORTEST_WATCH_SECONDS:
                        self.stopping.wait(SHORTEST_WATCH_SECONDS)  # not one listing per 410
                except (kube.KubeError, kube.KubeconfigInvalid, DatabaseError) as exc:
                    self._failed(exc)
                    self.stopping.wait(self.backoff())
        finally:
            self._unstamp()
            connection.close()  # this thread's own

    def backoff(self) -> float:
        return backoff_seconds(self.failures - 1, base=BACKOFF_SECONDS, cap=BACKOFF_MAX_SECONDS)

    # --- one list, then watches until a break, a resync or a stop -------------------------

    def _list_and_watch(self) -> None:
        cluster = Cluster.objects.filter(pk=self.cluster_id).first()
        if cluster is None:
            self.stopping.set()  # deleted: the process drops its threads at its next poll
            return
        with kube_client(cluster) as client:
            version = self._list(client, cluster)
            resync_at = time.monotonic() + settings.KUBE_RESYNC_SECONDS
            while not self.stopping.is_set():
                remaining = resync_at - time.monotonic()
                if remaining <= 0:
                    return  # the periodic resync: list again
                timeout = max(1, min(KubeWatch.WATCH_TIMEOUT_SECONDS, math.ceil(remaining)))
                version = self._watch(client, cluster, version, timeout)
                connection.close()  # held only while events are written

    def _list(self, client: KubeClient, cluster: Cluster) -> str:
        nodes = self.kind == KubeWatch.Kind.NODES
        listed_at = timezone.now()
        listing: kube.Listing[Any] = client.list_nodes() if nodes else client.list_pods()
        if not listing.complete:
            assert listing.error is not None
            raise listing.error
        sync = nodes_sync if nodes else pods_sync
        with self._held() as there:
            if not there:
                return listing.resource_version
            sync(cluster=cluster, listing=listing, listed_at=listed_at, now=timezone.now())
        self._stamp(listed_at, force=True)
        self._listed_clock = time.monotonic()
        self._recovered()
        return listing.resource_version

    def _watch(self, client: KubeClient, cluster: Cluster, version: str, timeout: int) -> str:
        """One watch request from `version`; answers the resourceVersion it reached."""
        stream: WatchStream[Any]
        if self.kind == KubeWatch.Kind.NODES:
            stream = client.watch_nodes(resource_version=version, timeout_seconds=timeout)
        else:
            stream = client.watch_pods(resource_version=version, timeout_seconds=timeout)
        self._stream = stream
        begun = time.monotonic()
        events = 0
        try:
            if self.stopping.is_set():
                return version  # stopped before stop() could see the stream to cut
            for event in stream:
                seen = timezone.now()
                with self._held() as there:
                    if not there:
                        return version
                    self._apply(cluster, event, seen)
                version = event.resource_version
                events += 1
                self._stamp(seen)
        except kube.Expired as exc:
            raise _Relist() from exc
        finally:
            self._stream = None
        if not self.stopping.is_set():
            self._stamp(timezone.now())  # ended by the server: unbroken up to now
            if not events and time.monotonic() - begun < SHORTEST_WATCH_SECONDS:
                self.stopping.wait(SHORTEST_WATCH_SECONDS)
        return version

    def _apply(self, cluster: Cluster, event: kube.WatchEvent[Any], now: datetime) -> int:
        if self.kind == KubeWatch.Kind.NODES:
            return node_event_apply(cluster=cluster, event=event, now=now)
        return pod_event_apply(cluster=cluster, event=event, now=now)

    @contextlib.contextmanager
    def _held(self) -> Iterator[bool]:
        """A transaction in which the cluster cannot be deleted (its row held FOR KEY
        SHARE), so that what the thread writes names a cluster that is there: a deletion
        under way is waited for. Yields whether the cluster is there; once it is gone the
        thread ends, having written nothing (the process drops it at its next poll)."""
        with transaction.atomic():
            held = rows_key_share(Cluster.objects.filter(pk=self.cluster_id).values_list("pk"))
            if not held:
                self.stopping.set()
            yield bool(held)

    # --- stamps and errors -------------------------------------------------------------

    def _stamp(self, at: datetime, *, force: bool = False) -> None:
        if not force and time.monotonic() - self._stamped_clock < KubeWatch.STAMP_EVERY_SECONDS:
            return
        with self._held() as there:
            if not there:
                return
            kube_watch_stamp(cluster_id=self.cluster_id, kind=self.kind, at=at)
        self._stamped, self._stamped_clock = at, time.monotonic()

    def _unstamp(self) -> None:
        if self._stamped is None:
            return
        with contextlib.suppress(DatabaseError):  # else it goes stale by itself
            kube_watch_unstamp(cluster_id=self.cluster_id, kind=self.kind, stamped=self._stamped)
        self._stamped, self._stamped_clock = None, 0.0

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        self._unstamp()  # not current any more: the beat pass lists it until we are back
        connection.close()  # a broken connection is not used again
        error = str(exc) or type(exc).__name__
        if error != self._error:
            self._error = error
            logger.warning("watch %s of %s: %s", *self._what(), error)

    def _recovered(self) -> None:
        if self._error:
            logger.warning("watch %s of %s: listed again, watching", *self._what())
        self._error, self.failures = "", 0

    def _what(self) -> tuple[str, str]:
        return str(self.kind), self.cluster_name


class KubeWatchProcess:
    """The threads of every observed cluster, kept in step with the cluster table."""

    def __init__(self, *, poll_seconds: float = POLL_SECONDS) -> None:
        self.poll_seconds = poll_seconds
        self.watchers: dict[tuple[int, str], KubeWatcher] = {}
        self.stopping = threading.Event()
        self._stopped: list[KubeWatcher] = []

    def stop(self) -> None:
        """Ask it to end (a signal handler calls this)."""
        self.stopping.set()

    def run(self) -> None:
        logger.info("kube watch: started")
        try:
            while not self.stopping.is_set():
                try:
                    self.poll()
                except DatabaseError as exc:
                    logger.warning("kube watch: reading the clusters failed: %s", exc)
                    connection.close()
                self.stopping.wait(self.poll_seconds)
        finally:
            self.shutdown()
        logger.info("kube watch: stopped")

    def poll(self) -> None:
        """Threads for the observed clusters as they are now."""
        wanted: dict[tuple[int, str], tuple[str, str]] = {}
        for pk, name, kubeconfig in kube_observed().values_list("pk", "name", "kubeconfig"):
            digest = hashlib.sha256(str(kubeconfig).encode()).hexdigest()
            for kind in KINDS:
                wanted[(pk, kind.value)] = (name, digest)
        for key, watcher in list(self.watchers.items()):
            same = key in wanted and wanted[key][1] == watcher.kubeconfig_digest
            if same and watcher.is_alive():
                continue
            watcher.stop()
            self._stopped.append(self.watchers.pop(key))
        for key, (name, digest) in wanted.items():
            if key not in self.watchers:
                watcher = KubeWatcher(
                    cluster_id=key[0], cluster_name=name, kind=key[1], kubeconfig_digest=digest
                )
                self.watchers[key] = watcher
                watcher.start()
        self._stopped = [w for w in self._stopped if w.is_alive()]

    def shutdown(self, timeout: float = STOP_SECONDS) -> None:
        everyone = [*self.watchers.values(), *self._stopped]
        for watcher in everyone:
            watcher.stop()
        _join(everyone, timeout)
        self.watchers.clear()
        self._stopped = []
        connection.close()


def _join(threads: Iterable[threading.Thread], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
