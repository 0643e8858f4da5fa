"""No runtime hook calls up the stack, beyond the registries listed here with why each is
harmless.

import-linter sees imports only: an app that hands a callable to a lower app (a callback
set from its AppConfig.ready(), a function appended to a lower app's list) makes the
lower app call up the stack at run time, which no contract catches. This reads every
app's module-level code and AppConfig.ready() (the code that runs once, at start) and
finds each statement that passes something into a function or container defined in
another app or capvco_web: a call with any argument that is not a literal (data such as
roles_grant's permission names is not a hook; making an instance of a lower app's class,
a model field, is not either), an item set or appended into an imported container, a
decorator. Each one found must be a registry
listed below."""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.checkout import ROOT

APPS = ("capvco_web", "cloud", "gpus", "clusters", "sriov", "billing", "dashboard", "notify")

# The registries that remain, by where they are defined, and why each is harmless.
ALLOWED = {
    "capvco_web.metrics.metrics_register": (
        "collectors only read and return samples for /metrics; they decide nothing"
    ),
    "capvco_web.health.readiness_check_register": (
        "a check only reads (cloud's: when each account's whitesky last answered, from the "
        "counters store) and says ok or what is wrong for /readyz; it decides nothing"
    ),
    "capvco_web.ownership.account_paths_register": (
        "data, not code: each model's path to its account, which scoping reads"
    ),
    "capvco_web.retention.history_register": (
        "each app prunes its own history rows when the daily prune asks: it counts and "
        "deletes rows of its own app past their retention, and decides nothing for others"
    ),
    "clusters.plan.planner_register": (
        "a planner returns steps as data for its own rows (sriov's NIC detaches); it is "
        "called by the cluster plan, reads only, and its steps are carried out by its own "
        "act: a plan of the app above, gathered, not a decision made below"
    ),
    "cloud.models.CUSTOMER_MOVE_CHECKS": (
        "a veto that reads only: an account moving to another whitesky customer is refused "
        "when clusters' VM names would become ambiguous there; it writes nothing and can "
        "only refuse. The account's change is the base app's (its API, admin and services "
        "move into cloud, which cannot import clusters), and it is validated on every "
        "path through Account.clean(): the one place the names above are heard"
    ),
}


@dataclass(frozen=True)
class Hook:
    module: str  # the file that registers, relative to the checkout
    line: int
    target: str  # the registry: module.name where it is defined

    def __str__(self) -> str:
        return f"{self.module}:{self.line} registers into {self.target}"


def _app(dotted: str) -> str | None:
    root = dotted.split(".", 1)[0]
    return root if root in APPS else None


def _imports(body: list[ast.stmt], module: str) -> dict[str, str]:
    """Local name -> dotted name, for every import among these statements (not in defs)."""
    names: dict[str, str] = {}
    for node in _statements(body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    names[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package
                package = module.split(".")[: -node.level]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
    return names


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run when this body runs: into if/with/try/for, not into defs
    and classes (their decorators and class bodies are read by the caller)."""
    for node in body:
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _statements([n for n in inner if isinstance(n, ast.stmt)])
            for handler in inner or []:
                if isinstance(handler, ast.ExceptHandler):
                    yield from _statements(handler.body)


def _dotted(node: ast.expr, names: dict[str, str]) -> str | None:
    """The dotted name an expression refers to, through the imports: `metrics_register`
    -> capvco_web.metrics.metrics_register; `CHECKS.append` -> cloud.models.CHECKS."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Call | ast.Subscript):
        return _dotted(node.func if isinstance(node, ast.Call) else node.value, names)
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join([names[node.id], *reversed(parts)])


def _is_class(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                found = getattr(found, name)
        except AttributeError:
            return False
        return inspect.isclass(found)
    return False


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


# Methods that put something into a container or a registry object.
_MUTATORS = {"append", "extend", "add", "update", "insert", "setdefault", "connect", "register"}


def _registry(target: str) -> str:
    """`cloud.models.CHECKS.append` -> cloud.models.CHECKS: the container, not its method."""
    head, _, last = target.rpartition(".")
    return head if last in _MUTATORS and head.count(".") >= 1 else target


def _hooks_in(body: list[ast.stmt], names: dict[str, str], app: str, where: str) -> Iterator[Hook]:
    def foreign(target: str | None) -> bool:
        return target is not None and _app(target) not in (None, app)

    for node in _statements(body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for decorator in node.decorator_list:
                target = _dotted(decorator, names)
                if target is not None and foreign(target):
                    yield Hook(where, decorator.lineno, _registry(target))
            if isinstance(node, ast.ClassDef):
                yield from _hooks_in(node.body, names, app, where)  # runs at import
            continue
        calls: list[ast.expr] = []
        if isinstance(node, ast.Expr):
            calls.append(node.value)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value:
            calls.append(node.value)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for put in targets:
                # An item set (or added to) in another app's container.
                if isinstance(put, ast.Subscript | ast.Attribute) or isinstance(
                    node, ast.AugAssign
                ):
                    target = _dotted(put, names)
                    if target is not None and foreign(target) and not _literal(node.value):
                        yield Hook(where, node.lineno, _registry(target))
        for call in calls:
            if not isinstance(call, ast.Call):
                continue
            target = _dotted(call.func, names)
            if target is None or not foreign(target) or _is_class(target):
                continue  # a lower app's class made into a value here (a field, a record)
            arguments = [*call.args, *(k.value for k in call.keywords)]
            if any(not _literal(argument) for argument in arguments):
                yield Hook(where, call.lineno, _registry(target))


def runtime_hooks(root: Path = ROOT) -> list[Hook]:
    """Every statement, at import or in an AppConfig.ready(), that hands something to
    another app or to capvco_web."""
    found: list[Hook] = []
    for app in APPS:
        for path in sorted((root / app).rglob("*.py")):
            if {"migrations", "tests"} & set(path.parts):
                continue
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            where = str(path.relative_to(root))
            tree = ast.parse(path.read_text(), filename=where)
            names = _imports(tree.body, module)
            found.extend(_hooks_in(tree.body, names, app, where))
            for node in ast.walk(tree):
                if not isinstance(node, ast.ClassDef):
                    continue
                for method in node.body:
                    if isinstance(method, ast.FunctionDef) and method.name == "ready":
                        local = {**names, **_imports(method.body, module)}
                        found.extend(_hooks_in(method.body, local, app, where))
    return found


def test_no_runtime_hook_calls_up_the_stack_but_the_listed_registries() -> None:
    unlisted = [str(hook) for hook in runtime_hooks() if hook.target not in ALLOWED]
    assert unlisted == [], (
        "a lower app (or capvco_web) would call these at run time, which import-linter "
        "cannot see: call the code from the app that knows it (or above), or list the "
        f"registry in ALLOWED with why it is harmless: {unlisted}"
    )


def test_every_listed_registry_is_still_used() -> None:
    """A registry that went stays off the list: the list says what remains."""
    used = {hook.target for hook in runtime_hooks()}
    assert sorted(set(ALLOWED) - used) == []


def test_the_scan_finds_a_callback_handed_down(tmp_path: Path) -> None:
    """The shape the vGPU release had: the app above sets what a lower app calls."""
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "apps.py").write_text(
        "from django.apps import AppConfig\n"
        "class ClustersConfig(AppConfig):\n"
        "    def ready(self):\n"
        "        from gpus.release_requests import release_orchestration_set\n"
        "        from cloud.models import CHECKS\n"
        "        from clusters.releases import release_blocker\n"
        "        release_orchestration_set(release_blocker)\n"
        "        CHECKS.append(release_blocker)\n"
        "        release_orchestration_set('data only')\n"
    )
    assert [str(hook) for hook in runtime_hooks(tmp_path)] == [
        "clusters/apps.py:7 registers into gpus.release_requests.release_orchestration_set",
        "clusters/apps.py:8 registers into cloud.models.CHECKS",
    ]
