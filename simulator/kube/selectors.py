"""Label and field selectors, in the syntax of the real API server.

Labels: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a` (exists), `!a` (does not
exist), `a>1`, `a<1`, joined by commas. Fields: `path=value`, `path==value`,
`path!=value`, joined by commas, over the paths each kind supports (others: 400, as the
server answers "field label not supported").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from simulator.kube.errors import bad_request

Matcher = Callable[[Mapping[str, Any]], bool]

_KEY = r"([A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?)"
_SET = re.compile(rf"^{_KEY}\s+(in|notin)\s+\((.*)\)$")
_EQ = re.compile(rf"^{_KEY}\s*(==|!=|=|>|<)\s*(.*)$")
_EXISTS = re.compile(rf"^(!?)\s*{_KEY}$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _split_requirements(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return [part for part in parts if part]


def _check_value(value: str, requirement: str) -> str:
    if len(value) > 63 or not _VALUE.match(value):
        raise bad_request(
            f"unable to parse requirement: values[0][{requirement}]: Invalid value: "
            f'"{value}": a valid label must be an empty string or consist of alphanumeric '
            "characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return value


def _label_requirement(text: str) -> Callable[[Mapping[str, str]], bool]:
    if match := _SET.match(text):
        key, operator = match.group(1), match.group(3)
        values = {_check_value(v.strip(), text) for v in match.group(4).split(",") if v.strip()}
        if operator == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EXISTS.match(text):
        negated, key = match.group(1) == "!", match.group(2)
        return (lambda labels: key not in labels) if negated else (lambda labels: key in labels)
    if match := _EQ.match(text):
        key, operator, value = match.group(1), match.group(3), match.group(4).strip()
        if operator in (">", "<"):
            try:
                bound = int(value)
            except ValueError:
                raise bad_request(
                    f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must "
                    f"be an integer: {text}"
                ) from None
            return _numeric(key, bound, greater=operator == ">")
        _check_value(value, text)
        if operator == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    raise bad_request(f"unable to parse requirement: found '{text}', expected: valid selector")


def _numeric(key: str, bound: int, *, greater: bool) -> Callable[[Mapping[str, str]], bool]:
    def check(labels: Mapping[str, str]) -> bool:
        try:
            number = int(labels[key])
        except (KeyError, ValueError):
            return False
        return number > bound if greater else number < bound

    return check


def label_matcher(selector: str) -> Matcher:
    """A predicate on whole objects for `labelSelector`; raises a 400 StatusError."""
    requirements = [_label_requirement(part) for part in _split_requirements(selector)]

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(requirement(labels) for requirement in requirements)

    return matches


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """A field as a selector sees it: missing is "", booleans are "true"/"false"."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_matcher(selector: str, supported: tuple[str, ...]) -> Matcher:
    """A predicate for `fieldSelector` over the `supported` paths; raises a 400."""
    checks: list[tuple[str, bool, str]] = []
    for part in _split_requirements(selector):
        for operator in ("!=", "==", "="):
            if operator in part:
                path, value = (piece.strip() for piece in part.split(operator, 1))
                break
        else:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{part}'")
        if path not in supported:
            raise bad_request(f"field label not supported: {path}")
        checks.append((path, operator == "!=", value))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, path) == value) != negated for path, negated, value in checks)

    return matches


def matcher(label_selector: str, field_selector: str, supported: tuple[str, ...]) -> Matcher | None:
    """Both selectors as one predicate; None when neither selects anything."""
    found: list[Matcher] = []
    if label_selector.strip():
        found.append(label_matcher(label_selector))
    if field_selector.strip():
        found.append(field_matcher(field_selector, supported))
    if not found:
        return None
    return lambda obj: all(check(obj) for check in found)
