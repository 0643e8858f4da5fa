"""``python -m tests.bench.task_costs <celery arguments>``: Celery's command line, with what
each task cost written down, one JSON line per task run, to the file ``TASK_COSTS_FILE``
names: the task, its arguments, its start and end (epoch seconds), the CPU seconds its
process used meanwhile, its state, and its SQL queries and writes, the writes by table.
The tasks run unchanged; only the pool process's database connection counts the
statements it sends.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from celery.__main__ import main as celery_main
from celery.signals import task_postrun, task_prerun

# The table a write names: INSERT INTO "t", UPDATE "t", DELETE FROM "t".
WRITTEN_TABLE = re.compile(r'^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"(?P<table>[^"]+)"', re.I)


class TaskCost:
    """The statements one task sent, as a connection's execute wrapper."""

    def __init__(self) -> None:
        self.started = time.time()
        self.cpu_started = time.process_time()
        self.queries = 0
        self.writes: Counter[str] = Counter()

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        self.queries += 1
        if match := WRITTEN_TABLE.match(sql):
            self.writes[match["table"]] += 1
        return execute(sql, params, many, context)


_running: dict[str, TaskCost] = {}


@task_prerun.connect
def cost_begin(task_id: str, **kwargs: Any) -> None:
    from django.db import connection

    cost = TaskCost()
    _running[task_id] = cost
    connection.execute_wrappers.append(cost)


@task_postrun.connect
def cost_end(
    task_id: str, task: Any, args: Any = (), kwargs: Any = None, state: Any = None, **more: Any
) -> None:
    from django.db import connection

    cost = _running.pop(task_id, None)
    if cost is None:
        return
    if cost in connection.execute_wrappers:
        connection.execute_wrappers.remove(cost)
    record = {
        "task": task.name,
        "args": list(args or ()),
        "start": cost.started,
        "end": time.time(),
        "cpu": time.process_time() - cost.cpu_started,
        "state": state,
        "queries": cost.queries,
        "writes": dict(cost.writes),
        "pid": os.getpid(),
    }
    # One short line per write in append mode: the pool's processes never interleave.
    with open(os.environ["TASK_COSTS_FILE"], "a") as out:
        out.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    sys.argv[0] = "celery"
    sys.exit(celery_main())
