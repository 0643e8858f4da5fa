"""Validators that models of several apps share.

`kubeconfig_checked` is the one check of a kubeconfig about to be stored or used (a
cluster's, an account's management cluster's; API, admin, dashboard, import, tasks): it
reads, its values have their types, and its server is one KUBE_ALLOWED_HOSTS allows.

`VisibleText` keeps names and identifiers that people type, read and compare free of
characters that do not show: controls (NUL, which PostgreSQL refuses, line breaks), format
characters (zero-width spaces, bidi overrides that make a name read backwards), other
spaces than the plain one, surrogates and private-use characters. Two names that look the
same are then the same name.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.utils.deconstruct import deconstructible

from capvco_web.integrations.kube import AllowedServers, Kubeconfig, kubeconfig_check

# Unicode categories Cc, Cf, Cs, Co, Zl, Zp and Zs but U+0020, and the Hangul fillers
# (letters that show nothing). A character class, so that the OpenAPI schema carries it
# as a `pattern`; the ranges were computed from unicodedata (Unicode 14).
_SHOWN_INVISIBLE = (
    r"\u0000-\u001f\u007f-\u00a0\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891"
    r"\u08e2\u115f-\u1160\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064"
    r"\u2066-\u206f\u3000\u3164\ue000-\uf8ff\ufeff\uffa0\ufff9-\ufffb"
    r"\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    r"\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
    r"\U000f0000-\U000ffffd\U00100000-\U0010fffd"
)
# Lone surrogates (Cs) are refused too, but left out of the schema's pattern: the regex
# engines of JSON Schema validators refuse a class that names them, and no text that is
# valid Unicode holds one.
_INVISIBLE = rf"{_SHOWN_INVISIBLE}\ud800-\udfff"
_INVISIBLE_CHAR = re.compile(f"[{_INVISIBLE}]")


def _ranges(char_class: str) -> list[tuple[int, int]]:
    """The code point ranges of a character class body written with `\\u`/`\\U` escapes."""
    chars = re.sub(r"\\[uU]([0-9a-f]{4,8})", lambda m: chr(int(m[1], 16)), char_class)
    found, i = [], 0
    while i < len(chars):
        if chars[i + 1 : i + 2] == "-":
            found.append((ord(chars[i]), ord(chars[i + 2])))
            i += 3
        else:
            found.append((ord(chars[i]), ord(chars[i])))
            i += 1
    return found


def _schema_pattern(invisible: list[tuple[int, int]]) -> str:
    """One character the rule allows, as a pattern that reads the same as code points
    (Python, JSON Schema validators) and as UTF-16 code units (JavaScript without the `u`
    flag), escaping no surrogate (which validators refuse) and naming characters past
    U+FFFF as themselves.

    Such a character is a surrogate pair in JavaScript, so no class may hold one as a
    range's end. Instead, before each character: a lookahead of the invisible ones one by
    one, and for the private-use planes a block test, `[\\ud7ff-Z]` and not
    `[\\ud7ff-A]`, with A just before the block and Z its last character: as code points
    that is the block; as code units, its high surrogates (the low surrogates of A and Z
    are both U+DFFF and cancel). The block's few characters that are not invisible are
    allowed first."""
    bmp = "".join(
        f"\\u{lo:04x}" if lo == hi else f"\\u{lo:04x}-\\u{hi:04x}"
        for lo, hi in invisible
        if hi <= 0xFFFF
    )
    singles: list[int] = []
    blocks: list[tuple[int, int]] = []
    allowed: list[int] = []
    for lo, hi in invisible:
        if hi <= 0xFFFF:
            continue
        first, last = lo & ~0x3FF, hi | 0x3FF  # the blocks of 1,024 with one high surrogate
        if (lo - first) + (last - hi) > 16:
            singles.extend(range(lo, hi + 1))
            continue
        if blocks and blocks[-1][1] + 1 == first:
            first = blocks.pop()[0]
        blocks.append((first, last))
        allowed.extend([*range(lo & ~0x3FF, lo), *range(hi + 1, last + 1)])
    shown = "".join(
        f"(?!(?=[\\ud7ff-{chr(last)}])(?![\\ud7ff-{chr(first - 1)}]))" for first, last in blocks
    )
    one = f"(?!{'|'.join(map(chr, singles))}){shown}[^{bmp}]"
    return f"(?:{'|'.join(map(chr, sorted(set(allowed))))}|{one})"


# One visible character, as a pattern: repeated between `^` and `$` in the schema.
_SCHEMA_CHARACTER = _schema_pattern(_ranges(_SHOWN_INVISIBLE))


@deconstructible
class VisibleText(RegexValidator):
    """Refuses text with a character that does not show, naming it (e.g. U+200B)."""

    def __init__(self) -> None:
        super().__init__(
            regex=f"^[^{_SHOWN_INVISIBLE}]*\\Z",
            message="Use visible characters and plain spaces only.",
            code="invisible_character",
        )

    def __call__(self, value: Any) -> None:
        found = _INVISIBLE_CHAR.search(str(value))
        if found is None:
            return
        char = found.group()
        name = unicodedata.name(char, "a control or private character").lower()
        raise ValidationError(
            "Use visible characters and plain spaces only: this holds U+%(code)04X (%(name)s).",
            code=self.code,
            params={"code": ord(char), "name": name},
        )

    def json_schema(self, direction: str) -> dict[str, str]:
        """The rule as the API's schema states it (see capvco_web.api_schema)."""
        return {"pattern": self.schema_pattern()}

    def schema_pattern(self, least: int = 0, most: int | None = None) -> str:
        """The rule as a pattern, with the length bounds of its field when it has them.

        The bounds stand beside it too (`minLength`, `maxLength`), but generators fold
        them into a pattern's repeat when they draw from it (schemathesis), and then write
        the characters past U+FFFF it names as `\\U` escapes, which no ECMAScript reads:
        no case of the operation could be drawn. A repeat that has the bounds already is
        left alone. (ECMAScript without the `u` flag counts a character past U+FFFF as two
        repeats, as it counts a string's length.)"""
        if not least and most is None:
            return f"^{_SCHEMA_CHARACTER}*$"
        return f"^{_SCHEMA_CHARACTER}{{{least},{'' if most is None else most}}}$"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VisibleText)

    def __hash__(self) -> int:
        return hash(VisibleText)


visible_text = VisibleText()


def kube_allowed_servers() -> AllowedServers:
    """The Kubernetes API servers a kubeconfig's credential may go to (KUBE_ALLOWED_HOSTS)."""
    return AllowedServers(settings.KUBE_ALLOWED_HOSTS, source="KUBE_ALLOWED_HOSTS")


def kubeconfig_checked(text: str, *, insecure_allowed: bool = False) -> Kubeconfig:
    """The kubeconfig, read and checked; raises KubeconfigInvalid naming the problem.
    `insecure_allowed`: the account's admin allows `insecure-skip-tls-verify`
    (`Account.kube_insecure_tls_allowed`)."""
    return kubeconfig_check(text, kube_allowed_servers(), insecure_allowed=insecure_allowed)


def is_date_text(value: str) -> bool:
    """Whether text can be a date and time at all: printable ASCII. Python's ISO parser
    stops at a NUL and Django's reads a trailing line break as nothing, so without this
    `2026-12-01T00:00:00Z<NUL>` would be read as the date before the NUL."""
    return value.isascii() and value.isprintable()
