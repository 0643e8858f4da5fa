"""Services start tasks by name (they never import a tasks module, which imports them):
each name they send is a task the workers know. (That a new account is observed at once
through it: tests/gpus/test_observe.py.)"""

from __future__ import annotations

from capvco_web.celery import app
from cloud.services import OBSERVE_ACCOUNT


def test_the_task_names_services_send_are_tasks_the_workers_know() -> None:
    app.loader.import_default_modules()  # what a worker imports at start
    assert OBSERVE_ACCOUNT in app.tasks
    # and the release a person asks for is the machines' task (they decide how it goes)
    assert "clusters.tasks.reservation_release_task" in app.tasks
