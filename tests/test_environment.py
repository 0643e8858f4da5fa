import subprocess
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from capvco_web.environment import (
    RUN_ENV,
    broker_transport_options,
    cache_config,
    database_config,
    default_broker_url,
    encryption_keys,
    kube_resync_seconds,
    new_secret_key,
    notify_webhook_hosts,
    observe_pass_seconds,
    redis_client_url,
    run_env_read,
    secret_from_env,
    settings_environment,
    throttle_rate,
    whitesky_allowed_hosts,
)
from tests.checkout import APPS, checkout_copy


@pytest.mark.parametrize(
    "url",
    ["", "mysql//nohost", "postgres-ish://x", "redis://127.0.0.1:6379/0", "not a url at all"],
)
def test_bad_database_url_is_refused_naming_the_variable(url: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_config(url)


def test_postgres_url_without_database_name_is_refused() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"DATABASE_URL.*names no database"):
        database_config("postgres://postgres@127.0.0.1:5432/")


def test_postgres_url_is_parsed_with_persistent_checked_connections() -> None:
    config = database_config("postgres://capvco:pw@db.internal:5433/capvco")
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["HOST"], config["PORT"], config["NAME"], config["USER"]) == (
        "db.internal",
        5433,
        "capvco",
        "capvco",
    )
    assert config["CONN_HEALTH_CHECKS"] is True


def test_sqlite_url_waits_for_locks_instead_of_failing(tmp_path: Path) -> None:
    config = database_config(f"sqlite:///{tmp_path}/db.sqlite3")
    assert config["NAME"] == f"{tmp_path}/db.sqlite3"
    assert config["OPTIONS"]["timeout"] >= 10


def test_the_default_broker_is_a_private_redis_of_each_var_dir_even_beside_a_shared_one(
    tmp_path: Path,
) -> None:
    # Whether or not a Redis answers on 127.0.0.1:6379 (one does here): two checkouts, or a
    # `make run` beside `make test`, never share a broker by default.
    one, other = default_broker_url(tmp_path / "one"), default_broker_url(tmp_path / "other")
    assert one == f"redis+socket://{tmp_path.resolve()}/one/redis.sock"
    assert other == f"redis+socket://{tmp_path.resolve()}/other/redis.sock"
    assert one == default_broker_url(tmp_path / "one" / ".." / "one")


def test_the_private_redis_is_reached_on_its_socket_by_redis_py(tmp_path: Path) -> None:
    socket = tmp_path / "redis.sock"
    assert redis_client_url(f"redis+socket://{socket}") == f"unix://{socket}"
    assert redis_client_url("redis://h:6379/2") == "redis://h:6379/2"
    assert redis_client_url("amqp://guest@h//") is None


@pytest.mark.parametrize("limit", [2, 30, 180, 3600])
def test_redis_gives_a_lost_task_up_soon_after_the_task_time_limit(limit: int) -> None:
    options = broker_transport_options("redis://127.0.0.1:6379/0", task_time_limit=limit)
    # Never while a live worker may still run it (limit and at least 5 s for the ack), and
    # not much later either: the sweep for lost messages runs well within the timeout.
    assert limit + 5 <= options["visibility_timeout"] <= limit * 1.25 + 5
    sweep = options["unacked_restore_interval"] * options["unacked_restore_throttle"]
    assert sweep <= max(1, options["visibility_timeout"] / 10)


def test_broker_options_of_the_settings_keep_the_test_key_prefix(settings) -> None:  # type: ignore[no-untyped-def]
    derived = broker_transport_options(
        settings.CELERY_BROKER_URL, task_time_limit=settings.CELERY_TASK_TIME_LIMIT
    )
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"].startswith("capvco-test-")
    assert (
        settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
        == (derived["visibility_timeout"])
    )


def test_the_private_redis_gives_a_lost_task_up_soon_after_the_task_time_limit(
    tmp_path: Path,
) -> None:
    options = broker_transport_options(default_broker_url(tmp_path), task_time_limit=180)
    assert options["visibility_timeout"] == 225
    assert broker_transport_options("amqp://guest@h//", task_time_limit=180) == {}


def test_secret_is_refused_missing_when_debug_is_off(tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"SECRET_KEY is not set: export SECRET_KEY="):
        secret_from_env(
            "", name="SECRET_KEY", path=tmp_path / "k", debug=False, make=new_secret_key
        )


def test_secret_is_generated_once_into_var_in_debug(tmp_path: Path) -> None:
    first = secret_from_env(
        "", name="SECRET_KEY", path=tmp_path / "k", debug=True, make=new_secret_key
    )
    second = secret_from_env(
        "", name="SECRET_KEY", path=tmp_path / "k", debug=True, make=new_secret_key
    )
    assert first == second and len(first) >= 50
    assert (tmp_path / "k").stat().st_mode & 0o077 == 0  # readable by its owner only


def test_encryption_key_that_is_not_fernet_is_refused_naming_the_variable() -> None:
    with pytest.raises(ImproperlyConfigured, match="FIELD_ENCRYPTION_KEY"):
        encryption_keys("not-a-key")


# `make run` in one shell, `manage.py` or `celery` later in another: a copy of this checkout
# (its virtualenv linked, no var/ yet), and commands run in it with a clean environment.
CHECKOUT = (
    "manage.py",
    "bin",
    *APPS,
    "templates",
    "static",
    "tests",
)
CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return checkout_copy(tmp_path / "capvco-web", CHECKOUT)


def shell(checkout: Path, *command: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A command typed in a new shell in the checkout: nothing exported but `env`, and the
    virtualenv not activated."""
    return subprocess.run(
        command,
        cwd=checkout,
        env={**CLEAN_ENV, "HOME": str(checkout.parent), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def make_run_configures(checkout: Path) -> None:
    """What `make run` (bin/run) does before it starts anything."""
    configured = shell(checkout, "bash", "-c", "source bin/common.sh && run_configure")
    assert configured.returncode == 0, configured.stderr


@pytest.mark.e2e  # commands in a copy of this checkout
def test_manage_py_in_another_shell_gets_what_make_run_configured(checkout: Path) -> None:
    make_run_configures(checkout)
    assert shell(checkout, ".venv/bin/python", "manage.py", "migrate", "-v0").returncode == 0

    result = shell(checkout, ".venv/bin/python", "manage.py", "gpucheck", "--orphans")

    # gpucheck --orphans: exit 0 and says so when there is no orphan, exit 1 when any.
    assert (result.returncode, result.stdout) == (0, "No orphaned reservations or VMs.\n"), (
        result.stderr
    )
    orphan = "from tests.factories import VgpuReservationFactory as F; F(orphaned=True)"
    assert shell(checkout, ".venv/bin/python", "manage.py", "shell", "-c", orphan).returncode == 0
    result = shell(checkout, ".venv/bin/python", "manage.py", "gpucheck", "--orphans")
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "Total: 0.00 EUR (1 orphaned reservation(s), 0 orphaned VM(s))"
    )


@pytest.mark.e2e  # commands in a copy of this checkout
def test_celery_in_another_shell_gets_the_broker_make_run_chose(checkout: Path) -> None:
    make_run_configures(checkout)
    chosen = run_env_read(checkout / "var" / RUN_ENV)

    result = shell(checkout, ".venv/bin/celery", "-A", "capvco_web", "report")

    assert result.returncode == 0, result.stderr
    assert f"CELERY_BROKER_URL: '{chosen['CELERY_BROKER_URL']}'" in result.stdout
    assert "\nDEBUG: True\n" in result.stdout


@pytest.mark.e2e  # commands in a copy of this checkout
def test_make_run_allows_its_simulator_and_only_with_the_simulator(checkout: Path) -> None:
    with_simulator = shell(
        checkout, "bash", "-c", "source bin/common.sh && run_configure", SIM_PORT="8099"
    )
    assert with_simulator.returncode == 0, with_simulator.stderr
    shown = "from django.conf import settings; print(settings.WHITESKY_ALLOWED_HOSTS)"
    result = shell(checkout, ".venv/bin/python", "manage.py", "shell", "-c", shown)
    assert result.stdout.splitlines()[-1] == "['http://127.0.0.1:8099']", result.stderr

    without = shell(
        checkout,
        "bash",
        "-c",
        "source bin/common.sh && run_configure",
        SIMULATOR="0",
        WHITESKY_ALLOWED_HOSTS="vco.example",
    )
    assert without.returncode == 0, without.stderr
    assert run_env_read(checkout / "var" / RUN_ENV)["WHITESKY_ALLOWED_HOSTS"] == "vco.example"


SECRET_KEY_MISSING = "SECRET_KEY is not set: export SECRET_KEY=... (needed with DEBUG off)"


@pytest.mark.e2e  # commands in a copy of this checkout
def test_the_environment_wins_over_what_make_run_configured(checkout: Path) -> None:
    make_run_configures(checkout)

    result = shell(checkout, ".venv/bin/python", "manage.py", "check", DEBUG="false")

    assert result.returncode == 1
    # One line naming the variable, not a traceback.
    assert result.stderr.splitlines() == [SECRET_KEY_MISSING]


@pytest.mark.e2e  # commands in a copy of this checkout
def test_without_make_run_debug_is_off_and_the_secret_key_required(checkout: Path) -> None:
    result = shell(checkout, ".venv/bin/python", "manage.py", "check")

    assert result.returncode == 1
    assert result.stderr.splitlines() == [SECRET_KEY_MISSING]
    assert not (checkout / "var" / "secret_key").exists()


@pytest.mark.e2e  # commands in a copy of this checkout
def test_without_the_encryption_key_check_says_so_in_one_line(checkout: Path) -> None:
    result = shell(
        checkout, ".venv/bin/python", "manage.py", "check", DEBUG="false", SECRET_KEY="k" * 50
    )

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "FIELD_ENCRYPTION_KEY is not set: export FIELD_ENCRYPTION_KEY=... (needed with DEBUG off)"
    ]


def test_run_env_line_that_is_not_name_value_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / RUN_ENV).write_text("# comment\n\nDEBUG=true\nCELERY_BROKER_URL\n")
    with pytest.raises(ImproperlyConfigured, match=r"run\.env, line 4: not a NAME=value line"):
        run_env_read(tmp_path / RUN_ENV)


def test_settings_read_the_environment_over_what_make_run_chose(tmp_path: Path) -> None:
    (tmp_path / RUN_ENV).write_text("DEBUG=true\nCELERY_BROKER_URL=redis://h:1/0?x=a=b\n")
    values = settings_environment(tmp_path, {"DEBUG": "false"})
    assert values == {"DEBUG": "false", "CELERY_BROKER_URL": "redis://h:1/0?x=a=b"}
    assert settings_environment(tmp_path / "none", {}) == {}


def test_the_cache_is_the_brokers_redis_so_web_processes_share_throttle_counts() -> None:
    config = cache_config("", broker_url="redis://127.0.0.1:6379/0")
    assert config["BACKEND"] == "capvco_web.cache.RedisCacheOrLocal"
    assert config["LOCATION"] == "redis://127.0.0.1:6379/0"


def test_the_cache_is_the_private_redis_beside_it(tmp_path: Path) -> None:
    config = cache_config("", broker_url=default_broker_url(tmp_path))
    assert config["BACKEND"] == "capvco_web.cache.RedisCacheOrLocal"
    assert config["LOCATION"] == f"unix://{tmp_path.resolve()}/redis.sock"
    assert config["KEY_PREFIX"] == "capvco-cache"


def test_the_cache_is_per_process_memory_beside_a_broker_that_is_not_redis() -> None:
    config = cache_config("", broker_url="amqp://guest@h//")
    assert config["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache"


def test_cache_url_wins_and_a_bad_one_is_refused_naming_the_variable() -> None:
    config = cache_config("redis://cache:6379/2", broker_url="redis://127.0.0.1:6379/0")
    assert config["LOCATION"] == "redis://cache:6379/2"
    with pytest.raises(ImproperlyConfigured, match="CACHE_URL"):
        cache_config("nosuchcache://x", broker_url="")


@pytest.mark.parametrize("value", ["60", "sixty/minute", "60/fortnight", "/minute", "-1/minute"])
def test_a_rate_that_is_not_one_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="API_RATE_USER"):
        throttle_rate(value, "API_RATE_USER")


def test_a_rate_is_taken_as_written() -> None:
    assert throttle_rate("1200/minute", "API_RATE_USER") == "1200/minute"
    assert throttle_rate(" 5 / hour", "API_RATE_USER") == "5/hour"


def test_whitesky_allowed_hosts_are_read_comma_separated_and_normalised() -> None:
    assert whitesky_allowed_hosts(" vco.example, HTTP://127.0.0.1:8081/ ,,") == [
        "vco.example",
        "http://127.0.0.1:8081",
    ]
    assert whitesky_allowed_hosts("") == []


def test_a_whitesky_allowed_hosts_entry_that_is_no_host_is_refused_naming_it() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"WHITESKY_ALLOWED_HOSTS: '\*\.example'"):
        whitesky_allowed_hosts("vco.example,*.example")


def test_a_notify_webhook_hosts_entry_that_is_no_host_is_refused_naming_it() -> None:
    assert notify_webhook_hosts(" hooks.example, HTTP://127.0.0.1:9000 ") == [
        "hooks.example",
        "http://127.0.0.1:9000",
    ]
    with pytest.raises(ImproperlyConfigured, match=r"NOTIFY_WEBHOOK_HOSTS: '\*\.example'"):
        notify_webhook_hosts("hooks.example,*.example")


@pytest.mark.parametrize("value", [0, 29, 86_401])
def test_a_kube_resync_out_of_range_stops_startup_naming_it(value: float) -> None:
    with pytest.raises(ImproperlyConfigured, match=f"KUBE_RESYNC_SECONDS={value} is out of range"):
        kube_resync_seconds(value)


def test_a_kube_resync_in_range_is_kept() -> None:
    assert kube_resync_seconds(600) == 600


@pytest.mark.parametrize("value", [0, 120, 500])
def test_an_observe_pass_not_ending_before_the_soft_time_limit_is_refused(value: float) -> None:
    with pytest.raises(ImproperlyConfigured, match="WHITESKY_OBSERVE_PASS_SECONDS"):
        observe_pass_seconds(value, soft_time_limit=120)


def test_an_observe_pass_ending_before_the_soft_time_limit_is_kept() -> None:
    assert observe_pass_seconds(90, soft_time_limit=120) == 90


def test_the_embedded_default_passes_every_system_check_without_a_warning() -> None:
    """What `make run` starts on (SQLite): a warning here is printed by every manage.py
    command a newcomer runs. Checked against the database, as `migrate` checks it."""
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [str(root / ".venv/bin/python"), "manage.py", "check", "--database", "default",
         "--fail-level", "WARNING"],
        cwd=root,
        env={**CLEAN_ENV, "DEBUG": "true", "DATABASE_URL": "sqlite:///:memory:"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


@pytest.mark.e2e  # commands in a copy of this checkout
def test_make_run_allows_a_webhook_receiver_on_this_machine(checkout: Path) -> None:
    make_run_configures(checkout)
    refusal = (
        "from notify.hosts import webhook_url_refusal as r; "
        "print(r('http://127.0.0.1:8090/hook'), r('http://127.0.0.1:8091/hook'))"
    )

    result = shell(checkout, ".venv/bin/python", "manage.py", "shell", "-c", refusal)

    # The demo's receiver port, and only that one.
    assert result.stdout.splitlines()[-1].startswith("None use https"), result.stderr
