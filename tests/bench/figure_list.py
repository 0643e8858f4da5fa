"""The figures the docs state from each benchmark's JSON line (tests/bench/figures.py)."""

from __future__ import annotations

from collections.abc import Callable

from tests.bench.figures import Bench, Figure, Kind, Result, at, count, ms, ratio, shown

# A ratio of two times of one run: the machine is shared, so it may move by half.
NOISY = 0.5


def _dashboard_pages(pages: tuple[str, ...], roles: tuple[str, ...]) -> tuple[Figure, ...]:
    figures: list[Figure] = []
    for page in pages:
        for role in roles:
            figures.append(
                Figure(page, at("pages", role, page, "queries"), "count", column=f"queries, {role}")
            )
        for role in roles:
            figures.append(
                Figure(
                    page, at("pages", role, page, "p95_ms"), "shown", "ms", column=f"p95, {role}"
                )
            )
    return tuple(figures)


DASHBOARD_PAGES = (
    "overview /",
    "reservations, unfiltered",
    "reservations, filtered (location, state)",
    "reservations, filtered (orphaned)",
    "reservations, filtered (not named by us)",
    "reservations, filtered (GPU type)",
    "reservations, filtered (GPU type, none held)",
    "reservations, searched (rare)",
    "reservations, searched (common)",
    "reservations, last page",
    "reservations, last page by name",
    "reservations, 10th page of a search",
    "clusters",
    "cluster /clusters/<id>/",
    "cluster fragment (poll)",
    "nodes",
    "nodes of a cluster, last page",
    "nodes, flagged (no GPU advertised)",
    "machines with no node",
    "audit log",
)


MONEY_PAGES = (
    "overview",
    "cluster",
    "overview cost CSV",
    "leak ledger",
    "overview, 24 h by the hour",
    "overview, 7 d by the hour",
    "overview, 24 h by the day",
    "overview, 30 d by the day",
    "overview, a year by the day",
    "location, 7 d by the hour",
    "location, a year by the day",
    "cluster, 7 d by the hour",
    "cluster, a year by the day",
    "overview cost CSV, a year by the day",
)


def _row(key: str, label: str, counts: tuple[tuple[str, str], ...]) -> tuple[Figure, ...]:
    """One row of a table: the counts of ``key``'s step (field, column), then its time."""
    return (
        *(Figure(label, at(key, field), "count", column=column) for field, column in counts),
        Figure(label, at(key, "seconds"), "shown", "s", column="time"),
    )


LIFECYCLE_COUNTS = (
    ("ws_reads", "whitesky reads"),
    ("ws_writes", "whitesky writes"),
    ("sql_queries", "SQL queries"),
    ("sql_writes", "SQL writes"),
)
OBSERVE_COUNTS = (
    ("list_calls", "list calls"),
    ("queries", "SQL queries"),
    ("sql_writes", "SQL writes"),
    ("row_writes", "rows written"),
)


def _plan_state(size: int, state: str) -> tuple[Figure, ...]:
    label = f"{state}, {size:,} machines"
    return (
        Figure(label, at(str(size), state, "queries"), "count", column="SQL queries"),
        Figure(label, at(str(size), state, "instances"), "count", column="models loaded"),
        Figure(label, at(str(size), state, "steps"), "count", column="steps"),
        Figure(label, at(str(size), state, "seconds"), "shown", "s", column="time"),
        Figure(label, at(str(size), state, "gc_ms"), "shown", "ms", column="cyclic GC"),
    )


def _per_machine_ratio(state: str) -> Figure:
    """Time per machine at 10,000 over time per machine at 1,000."""
    return Figure(
        f"{state}: time per machine at 10,000 / at 1,000",
        lambda r: round((r["10000"][state]["seconds"] / 10) / r["1000"][state]["seconds"], 2),
        "ratio",
        "x",
        tolerance=NOISY,
        column="per machine, 10,000 / 1,000",
    )


def _cheaper_share(policy: int) -> Callable[[Result], int]:
    """The share of a policy's GPU-hours paid in the cheaper location, in percent."""
    return lambda r: round(100 * r["results"][policy]["cheaper_location_share"])


# What bench_many_accounts gives of an idle round: label, where, kind, unit.
ROUND_FIGURES: tuple[tuple[str, tuple[str | int, ...], Kind, str], ...] = (
    ("whitesky calls per account", ("per_account", "ws_calls", "median"), "count", ""),
    ("SQL queries per account", ("per_account", "sql_queries", "median"), "count", ""),
    ("SQL writes beyond the stamps", ("sql_writes_unexpected",), "count", ""),
    ("locations not observed", ("locations_unobserved",), "count", ""),
    ("failed tasks", ("failed_tasks",), "count", ""),
    ("accounts late (a pass ended after 30 s)", ("late_accounts",), "shown", ""),
    ("round, from the send to the last task's end", ("seconds",), "shown", "s"),
    (
        "worker CPU per account, median",
        ("per_account", "worker_cpu_seconds", "median"),
        "shown",
        "s",
    ),
    ("worker CPU of the round", ("cpu_seconds", "worker_cpu"), "shown", "s"),
    ("PostgreSQL statement time", ("cpu_seconds", "database_active"), "shown", "s"),
    ("PostgreSQL sessions opened", ("cpu_seconds", "database_sessions"), "shown", ""),
    ("deepest queue", ("queue_peak",), "shown", ""),
    ("load at the round's end", ("load", 0), "shown", ""),
)


BENCHES: tuple[Bench, ...] = (
    Bench(
        "bench_api_paging",
        about="100,000 reservations, pages of 100, the 1,000th page",
        figures=(
            count("queries, the 1,000th page by cursor", "pages", "cursor, page 1,000", "queries"),
            count("queries, the 1,000th page by offset", "pages", "offset, page 1,000", "queries"),
            ms("the 1,000th page by cursor, p50", "pages", "cursor, page 1,000", "p50_ms"),
            ratio(
                "by cursor: the 1,000th page / the first, p50",
                at("ratios", "cursor deep/first p50"),
                NOISY,
            ),
            ratio(
                "by offset: the 1,000th page / the first, p50",
                at("ratios", "offset deep/first p50"),
                NOISY,
            ),
        ),
    ),
    Bench(
        "bench_plan",
        about="one cluster's plan and pass at 1,000 and 10,000 machines, best of 3",
        figures=(
            *(
                figure
                for size in (1000, 10000)
                for state in ("scale-up", "pending", "steady", "pass-full", "pass-unchanged")
                for figure in _plan_state(size, state)
            ),
            _per_machine_ratio("steady"),
            _per_machine_ratio("pass-unchanged"),
        ),
    ),
    Bench(
        "bench_gpu_lifecycle",
        about="a cluster of 1,000 machines of 3 GPUs over 10 locations, against the simulator",
        figures=(
            *_row("provision_1gpu", "provision a 1-GPU machine", LIFECYCLE_COUNTS),
            *_row("provision_2gpu", "provision a 2-GPU machine", LIFECYCLE_COUNTS),
            *_row("scale_up_1", "scale up by one 3-GPU machine", LIFECYCLE_COUNTS),
            *_row("idle_observe", "idle pass: observe", LIFECYCLE_COUNTS),
            *_row("idle_reconcile", "idle pass: reconcile", LIFECYCLE_COUNTS),
            Figure(
                "idle pass lists only, writes only stamps",
                at("idle_pass"),
                "count",
                column="whitesky reads",
            ),
        ),
    ),
    Bench(
        "bench_kube_observe",
        about="10 clusters x 500 nodes x 20 pods, pages of 500, against the fake Kubernetes API",
        figures=(
            *_row("first", "first pass", OBSERVE_COUNTS),
            *_row("unchanged", "unchanged clusters", OBSERVE_COUNTS),
            *_row("compared", "an annotation changed per cluster", OBSERVE_COUNTS),
            *_row("changed", "pods changed per cluster", OBSERVE_COUNTS),
        ),
    ),
    Bench(
        "bench_kube_watch",
        about="one cluster of 500 nodes x 20 pods, 6 pod changes a minute, a minute each way",
        figures=(
            shown("beat pass only: list calls", "beat", "list_calls"),
            count("with the watch: list calls", "watch", "list_calls"),
            count("the watch's first listing: list calls", "watch_first_listing", "list_calls"),
            count(
                "with the watch: every change mirrored within 2 s",
                "checks",
                "watch_changes_shown_within_2s",
            ),
            Figure(
                "beat pass only: change shown after, max",
                lambda r: max(r["beat"]["latencies"]),
                "shown",
                "s",
            ),
            Figure(
                "with the watch: change shown after, max",
                lambda r: max(r["watch"]["latencies"]),
                "shown",
                "s",
            ),
        ),
    ),
    Bench(
        "bench_rollup",
        about=(
            "bench_dashboard's world: 10,000 machines, 100,000 reservations; "
            "250 leaks, 1,000 idle GPU nodes"
        ),
        figures=tuple(
            figure
            for index, step in enumerate(
                (
                    "hour sample",
                    "hour sample again",
                    "leak ledger",
                    "leak ledger again",
                    "idle spells",
                    "idle spells again",
                    "sum a day of 24 hours",
                )
            )
            for figure in (
                Figure(step, at("steps", index, "queries"), "count", column="SQL queries"),
                Figure(
                    step, at("steps", index, "write_statements"), "count", column="write statements"
                ),
                Figure(step, at("steps", index, "seconds"), "shown", "s", column="time"),
            )
        ),
    ),
    Bench(
        "bench_dashboard",
        about=(
            "100,000 reservations, 10,000 machines in 50 clusters, 10,100 nodes, 101,000 pods, "
            "100,000 audit events; the test client, the whole request; 40 requests a page"
        ),
        figures=_dashboard_pages(DASHBOARD_PAGES, ("superuser", "account admin")),
    ),
    Bench(
        "bench_money",
        about=(
            "1,000 clusters with a year's history, asked on the 28th, as the pages open and "
            "over windows picked; 40 requests a page"
        ),
        figures=(
            *(
                figure
                for page in MONEY_PAGES
                for figure in (
                    Figure(page, at("pages", page, "queries"), "count", column="queries"),
                    Figure(page, at("pages", page, "p95_ms"), "shown", "ms", column="p95"),
                )
            ),
            *(
                Figure(
                    f"the overview's queries the same for {windows}",
                    at("window_queries_flat", step),
                    "count",
                    column="queries",
                )
                for windows, step in (
                    ("24 h, 30 d and a year by the day", "day"),
                    ("24 h and 7 d by the hour", "hour"),
                )
            ),
        ),
    ),
    Bench(
        "bench_simulator",
        about="10,000 vGPUs and 2,000 VMs in the whitesky simulator, 3 s a request kind",
        figures=(
            Figure(
                "vGPU list, a page of 500",
                at("requests", "vGPU list, limit=500 (one page)", "per_baseline"),
                "ratio",
                "x",
                tolerance=NOISY,
                column="time / GET /me",
            ),
            Figure(
                "vGPU list, all 10,000 at once",
                at("requests", "vGPU list, limit=0 (10000 items)", "per_baseline"),
                "ratio",
                "x",
                tolerance=NOISY,
                column="time / GET /me",
            ),
            Figure(
                "VM list",
                at("requests", "VM list (2000 VMs)", "per_baseline"),
                "ratio",
                "x",
                tolerance=NOISY,
                column="time / GET /me",
            ),
            Figure(
                "vGPU list, a page of 500",
                at("requests", "vGPU list, limit=500 (one page)", "ms"),
                "shown",
                "ms",
                column="time",
            ),
            Figure(
                "vGPU list, all 10,000 at once",
                at("requests", "vGPU list, limit=0 (10000 items)", "ms"),
                "shown",
                "ms",
                column="time",
            ),
            Figure(
                "VM list", at("requests", "VM list (2000 VMs)", "ms"), "shown", "ms", column="time"
            ),
        ),
    ),
    Bench(
        "bench_sriov",
        about=(
            "10 VMs, 50 ADDs one after another, then 100 at once; "
            "gunicorn 2 x 8 threads, 4 worker processes"
        ),
        figures=(
            ratio(
                "100 ADDs at once: wall time / the per-VM serial floor",
                lambda r: round(r["concurrent_add"]["wall_s"] / r["per_vm_serial_floor_s"], 2),
                NOISY,
            ),
            count("whitesky listings per ADD, most", "listings_per_add", "max"),
            shown("VMs attaching at once in the burst, most", "burst_vms_attaching_at_once"),
            count("overlapping attaches on one VM: none", "checks", "no_overlapping_attach_per_vm"),
            count("every ADD a distinct NIC", "checks", "distinct_nics"),
            Figure("per-VM serial floor", at("per_vm_serial_floor_s"), "shown", "s"),
            Figure("100 ADDs at once, wall", at("concurrent_add", "wall_s"), "shown", "s"),
            ms("an ADD answered, p50 / in the burst", "concurrent_add", "p50_ms"),
            ms("queue wait in the burst, p50", "burst_queue_wait", "p50_ms"),
            ms("attach in the burst, p50", "burst_attach", "p50_ms"),
        ),
    ),
    Bench(
        "bench_scale_out",
        about=(
            "0 → 100 one-GPU machines and back on 8 slots; 2 s per VM create, "
            "0.5 s per other write, 3 s intervals"
        ),
        figures=(
            ratio("speed-up over one write at a time (100 x 3 s of latency)", at("speedup"), NOISY),
            count("VMs made twice", "parallel", "duplicate_vms"),
            count("vGPUs made twice", "parallel", "duplicate_vgpus"),
            count(
                "vGPUs billed unassigned after scaling down", "parallel", "unassigned_billed_after"
            ),
            shown(
                "whitesky writes in flight, most",
                "parallel",
                "up_worker",
                "ws_writes_in_flight_max",
            ),
            count("VMs created", "parallel", "up_calls", "createVirtualMachine"),
            count("vGPUs reserved", "parallel", "up_calls", "reserveAndAttachVGPUToVM"),
            Figure("0 → 100", at("parallel", "up_seconds"), "shown", "s"),
            Figure("100 → 0", at("parallel", "down_seconds"), "shown", "s"),
        ),
    ),
    Bench(
        "bench_many_accounts",
        about=(
            "50 accounts x 3 locations x 2,000 one-GPU machines, seeded converged; beat's tasks on "
            "a real worker of 2 processes; the 2nd and 3rd rounds, idle"
        ),
        figures=tuple(
            Figure(label, at("rounds", index, *path), kind, unit, column=column)
            for label, path, kind, unit in ROUND_FIGURES
            for index, column in ((1, "2nd round"), (2, "3rd round"))
        ),
    ),
    Bench(
        "bench_notify_tests",
        about=(
            "16 test messages at once to a receiver answering after 8 s; gunicorn 2 x 4 threads, "
            "2 worker processes"
        ),
        figures=(
            count("test messages taken", "tests_taken"),
            count("test messages refused by the account's minute", "tests_refused"),
            shown("test messages posted to the receiver", "receiver_posts"),
            ratio("/healthz during the tests / alone, p50", at("ratio_p50", "healthz"), NOISY),
            ratio(
                "another account's API during the tests / alone, p50",
                at("ratio_p50", "other_account_api"),
                NOISY,
            ),
            ms("a test message answered, most", "test_posts", "max_ms"),
        ),
    ),
    Bench(
        "bench_autoscale",
        about=(
            "a seeded day of GPU jobs (seed 1, 137 jobs) played at 720x through the real "
            "processes, three policies"
        ),
        figures=tuple(
            figure
            for index, policy in enumerate(("static (peak)", "ca-model", "autoscaler"))
            for figure in (
                Figure(
                    policy,
                    at("results", index, "waste"),
                    "ratio",
                    "x",
                    tolerance=0.15,
                    column="GPU-hours paid / run by pods",
                ),
                Figure(policy, at("results", index, "never_ran"), "count", column="pods never ran"),
                Figure(policy, at("results", index, "lost"), "count", column="pods lost"),
                Figure(
                    policy, at("results", index, "left_billed"), "count", column="vGPUs left billed"
                ),
                Figure(
                    policy,
                    _cheaper_share(index),
                    "shown",
                    "%",
                    column="paid in the cheaper location",
                ),
                Figure(
                    policy,
                    at("results", index, "pending_p50_s"),
                    "shown",
                    "s",
                    column="pending p50",
                ),
                Figure(
                    policy,
                    at("results", index, "pending_p95_s"),
                    "shown",
                    "s",
                    column="pending p95",
                ),
                Figure(
                    policy, at("results", index, "machines_made"), "shown", column="machines made"
                ),
                Figure(
                    policy,
                    at("results", index, "whitesky_writes"),
                    "shown",
                    column="whitesky writes",
                ),
            )
        ),
    ),
    Bench(
        "bench_cost_by_label",
        about=(
            "a cluster of 300 label sets and one of 10, each with a year of money history "
            "(hours for the last 60 days); 20 runs"
        ),
        figures=(
            count("rows of label sets in the history", "rows"),
            *(
                figure
                for window in (
                    "24 h by the hour",
                    "7 d by the hour",
                    "30 d by the day",
                    "a year by the day",
                    "the API's answer, a year by the day",
                )
                for figure in (
                    Figure(window, at("windows", window, "queries"), "count", column="queries"),
                    Figure(window, at("windows", window, "p95_ms"), "shown", "ms", column="p95"),
                )
            ),
            Figure(
                "the queries the same for every window and for 10 label sets",
                at("queries_flat"),
                "count",
                column="queries",
            ),
        ),
    ),
    Bench(
        "bench_gpu_use",
        about="a cluster of 64 GPUs with a day of dcgm-exporter samples (18,432); 20 runs",
        figures=(
            count("samples in the window", "samples"),
            count("gpu_use(): queries", "gpu_use_queries"),
            count("the API's answer: queries", "api_queries"),
            ms("gpu_use(), p95", "gpu_use_p95_ms"),
            ms("the API's answer, p95", "api_p95_ms"),
        ),
    ),
)
