"""Reading configuration from the environment.

Pure functions, so that settings parsing can be tested without reloading Django.
Every error names the variable that caused it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlsplit

import environ
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from capvco_web.integrations.whitesky.hosts import AllowedHosts

SUPPORTED_DATABASE_SCHEMES = ("sqlite", "postgres", "postgresql", "pgsql")

# Written by `make run` (bin/run) into the var dir: the settings it chose, so that a later
# manage.py or celery in the same checkout, in any shell, runs with the same ones.
RUN_ENV = "run.env"


def database_config(url: str) -> dict[str, Any]:
    """Parse DATABASE_URL into Django's DATABASES["default"]."""
    scheme = urlparse(url).scheme
    if not url or scheme not in SUPPORTED_DATABASE_SCHEMES:
        raise ImproperlyConfigured(
            f"DATABASE_URL={url!r} is not a supported database URL: use "
            "postgres://USER@HOST:PORT/NAME or sqlite:////absolute/path.sqlite3"
        )
    try:
        config: dict[str, Any] = environ.Env.db_url_config(url)
    except Exception as exc:  # django-environ raises several types for malformed URLs
        raise ImproperlyConfigured(f"DATABASE_URL={url!r} cannot be parsed: {exc}") from exc
    if config["ENGINE"] != "django.db.backends.sqlite3" and not config.get("NAME"):
        raise ImproperlyConfigured(f"DATABASE_URL={url!r} names no database")
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # SQLite under concurrent web + worker processes: wait for locks instead of failing.
        config.setdefault("OPTIONS", {}).update({"timeout": 20, "transaction_mode": "IMMEDIATE"})
    else:
        config["CONN_MAX_AGE"] = 60
        config["CONN_HEALTH_CHECKS"] = True
    return config


def run_env_read(path: Path) -> dict[str, str]:
    """The NAME=value lines of a run.env (comments and blank lines aside); {} without one."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.isidentifier():
            raise ImproperlyConfigured(
                f"{path}, line {number}: not a NAME=value line (written by `make run`; "
                "delete the file or run `make run` again)"
            )
        values[name] = value
    return values


def settings_environment(var_dir: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """What settings read: the environment, over what `make run` wrote to the var dir."""
    return {**run_env_read(var_dir / RUN_ENV), **environ}


# The private Redis `make run` starts for its var dir listens on this unix socket only: no
# TCP port, so two checkouts on one host can neither collide nor reach each other's.
PRIVATE_REDIS_SOCKET = "redis.sock"


def private_redis_socket(var_dir: Path) -> Path:
    return var_dir.resolve() / PRIVATE_REDIS_SOCKET


def default_broker_url(var_dir: Path) -> str:
    """The private Redis of this var dir (started by `make run`), never a shared one."""
    return f"redis+socket://{private_redis_socket(var_dir)}"


def redis_client_url(broker_url: str) -> str | None:
    """The redis-py URL of the Redis a Celery broker URL names (redis://, rediss://,
    redis+socket:///path); None for a broker that is not Redis."""
    parsed = urlparse(broker_url)
    if parsed.scheme in ("redis", "rediss"):
        return broker_url
    if parsed.scheme == "redis+socket":
        return f"unix://{parsed.path}" + (f"?{parsed.query}" if parsed.query else "")
    return None


def broker_transport_options(broker_url: str, *, task_time_limit: int) -> dict[str, Any]:
    """CELERY_BROKER_TRANSPORT_OPTIONS for the broker of this URL."""
    if urlparse(broker_url).scheme in ("redis", "rediss", "redis+socket", "sentinel"):
        return redis_broker_options(task_time_limit)
    return {}


def redis_broker_options(task_time_limit: int) -> dict[str, Any]:
    """Redis hands a message that stayed unacknowledged for visibility_timeout to another
    worker. Tasks are acknowledged once they ran, at most task_time_limit, so the task of a
    killed worker runs again soon after that limit rather than after Redis's default hour.

    The margin, a quarter of the limit and at least 5 s, covers the acknowledgement after
    the limit, and a retry's countdown (up to 20 s), during which the message waits in the
    worker unacknowledged: shorter, and a live worker's task would run twice.
    """
    visibility_timeout = task_time_limit + max(5, task_time_limit // 4)
    return {
        "visibility_timeout": visibility_timeout,
        # kombu looks for such messages every 10 s but scans only on every 10th look: scan
        # on each look, often enough that the timeout and not the sweep sets the delay.
        "unacked_restore_interval": min(10, max(1, visibility_timeout // 10)),
        "unacked_restore_throttle": 1,
    }


def secret_from_env(
    value: str, *, name: str, path: Path, debug: bool, make: Callable[[], str]
) -> str:
    """A secret from the environment; in DEBUG, generated once into var/ when unset."""
    if value:
        return value
    if not debug:
        raise ImproperlyConfigured(f"{name} is not set: export {name}=... (needed with DEBUG off)")
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    new = make()
    path.write_text(new)
    path.chmod(0o600)
    return new


def new_secret_key() -> str:
    return secrets.token_urlsafe(50)


def new_encryption_key() -> str:
    return Fernet.generate_key().decode()


def encryption_keys(value: str) -> list[str]:
    """FIELD_ENCRYPTION_KEY: comma-separated Fernet keys, newest first (for rotation)."""
    keys = [k.strip() for k in value.split(",") if k.strip()]
    for key in keys:
        try:
            Fernet(key)
        except ValueError as exc:
            raise ImproperlyConfigured(
                "FIELD_ENCRYPTION_KEY holds a key that is not a Fernet key "
                "(32 url-safe base64-encoded bytes)"
            ) from exc
    if not keys:
        raise ImproperlyConfigured("FIELD_ENCRYPTION_KEY is empty")
    return keys


CACHE_KEY_PREFIX = "capvco-cache"
# Redis, or each process's memory while Redis is down (capvco_web.cache).
REDIS_CACHE = "capvco_web.cache.RedisCacheOrLocal"


def cache_config(url: str, *, broker_url: str) -> dict[str, Any]:
    """CACHES["default"]: CACHE_URL (e.g. redis://HOST:6379/1, unix:///path/redis.sock,
    locmemcache://); unset, the broker's Redis when the broker is Redis, else memory of each
    process."""
    url = url or redis_client_url(broker_url) or ""
    if not url:
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    if urlparse(url).scheme == "unix":  # django-environ knows no socket URL; redis-py does
        return {
            "BACKEND": REDIS_CACHE,
            "LOCATION": url,
            "KEY_PREFIX": CACHE_KEY_PREFIX,
        }
    try:
        config: dict[str, Any] = environ.Env.cache_url_config(url)
    except Exception as exc:  # django-environ raises several types for unknown schemes
        raise ImproperlyConfigured(
            f"CACHE_URL={url!r} is not a cache URL: use redis://HOST:PORT/DB, "
            "unix:///PATH/redis.sock or locmemcache://"
        ) from exc
    config.setdefault("KEY_PREFIX", CACHE_KEY_PREFIX)
    if config["BACKEND"] == "django.core.cache.backends.redis.RedisCache":
        config["BACKEND"] = REDIS_CACHE
    return config


THROTTLE_PERIODS = ("s", "m", "h", "d")


def throttle_rate(value: str, name: str) -> str:
    """An API rate such as `60/minute` (N per second, minute, hour or day)."""
    count, slash, period = value.partition("/")
    if not (slash and count.strip().isdigit() and period.strip()[:1] in THROTTLE_PERIODS):
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a rate: write N/second, N/minute, N/hour or N/day"
        )
    return f"{int(count)}/{period.strip()}"


def whitesky_allowed_hosts(value: str) -> list[str]:
    """WHITESKY_ALLOWED_HOSTS: comma-separated hosts the whitesky credential may be sent to
    (see capvco_web/integrations/whitesky/hosts.py), normalised."""
    try:
        hosts = AllowedHosts(value.split(","), source="WHITESKY_ALLOWED_HOSTS")
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    return list(hosts.entries)


def notify_webhook_hosts(value: str) -> list[str]:
    """NOTIFY_WEBHOOK_HOSTS: comma-separated hosts webhook notifications may be sent to,
    written as WHITESKY_ALLOWED_HOSTS is, normalised."""
    try:
        hosts = AllowedHosts(value.split(","), source="NOTIFY_WEBHOOK_HOSTS")
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    return list(hosts.entries)


def whitesky_proxy_url(value: str) -> str:
    """WHITESKY_PROXY_URL: the one proxy whitesky calls go through ("" for none), an
    http(s) URL of a host (and port); the environment's HTTP(S)_PROXY are never used."""
    value = value.strip()
    if not value:
        return ""
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - refuses a port that is not a number
    except ValueError:
        parts = parts._replace(netloc="")
    plain = parts.path in ("", "/") and not parts.query and not parts.fragment
    if parts.scheme not in ("http", "https") or not parts.hostname or not plain:
        raise ImproperlyConfigured(
            "WHITESKY_PROXY_URL must be a proxy's http:// or https:// URL with a host and "
            "optionally a port (e.g. http://proxy.internal:3128), nothing else"
        )
    return value


# The database's ceiling on a pool's replicas (a check constraint, clusters.models); the
# bound people meet is POOL_MAX_REPLICAS, at most this. One pool is planned in one pass:
# tests/bench/bench_plan.py plans 10,000 machines, so no pool may ask for more.
POOL_REPLICAS_CEILING = 10_000


def pool_max_replicas(value: int) -> int:
    """POOL_MAX_REPLICAS, checked: between 1 and the database's ceiling."""
    if not 1 <= value <= POOL_REPLICAS_CEILING:
        raise ImproperlyConfigured(
            f"POOL_MAX_REPLICAS={value} is out of range: give 1 to {POOL_REPLICAS_CEILING}"
        )
    return value


def observe_pass_seconds(value: float, *, soft_time_limit: float) -> float:
    """WHITESKY_OBSERVE_PASS_SECONDS, checked: an observation's calls end by then, and the
    pass writes what it listed after them, before the task's soft time limit."""
    if not 0 < value < soft_time_limit:
        raise ImproperlyConfigured(
            f"WHITESKY_OBSERVE_PASS_SECONDS={value:g} must be above 0 and below "
            f"CELERY_TASK_SOFT_TIME_LIMIT ({soft_time_limit:g}): the pass writes what it "
            "listed after its calls"
        )
    return value


def kube_resync_seconds(value: float) -> float:
    """KUBE_RESYNC_SECONDS, checked: how often the watch process lists each cluster's nodes
    and pods again, whatever its watches showed (a safety net, not the way changes come)."""
    if not 30 <= value <= 86_400:
        raise ImproperlyConfigured(
            f"KUBE_RESYNC_SECONDS={value:g} is out of range: give 30 to 86400 seconds"
        )
    return value
