"""Install the CNI plugin on a node (run by the DaemonSet of sriov/manifests.py, as root,
with the host's CNI directories mounted): the plugin as one executable zip (with pyroute2
inside, so the node needs only python3), the node's own agent token, the node's name and
the agent API's URL, which the plugin reads from that directory alone.

The DaemonSet's Secret holds the cluster's enrollment token, which only enrolls nodes: the
installer exchanges it at the agent API (`POST <agent url>/enroll/`) for a token bound to
this node, and writes that into the plugin's directory (0700; the token 0600). It enrolls
again, presenting its current node token, when the Secret's enrollment token changes (a
rotation). No redirect is followed: the token goes to the agent URL only.

No Django in here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

PLUGIN = "capvco-sriov"
TOKEN_PREFIX = "cvsriov_"  # noqa: S105 - a prefix
ENROLL_TIMEOUT_SECONDS = 30


class EnrollFailed(Exception):
    """The agent API did not give this node its token; the message says why."""


def _write(path: Path, content: bytes, mode: int) -> bool:
    """Write atomically (beside, then rename); False when it held that already."""
    if path.exists() and path.read_bytes() == content:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


def plugin_zip() -> bytes:
    """The plugin and pyroute2 as a zip application (`#!/usr/bin/env python3`)."""
    import pyroute2

    here = Path(__file__).resolve().parent
    package = Path(pyroute2.__file__).resolve().parent
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "plugin.pyz"
        entries = [
            ("__main__.py", b"from capvco_sriov_plugin import main\nmain()\n"),
            ("capvco_sriov_plugin.py", (here / "plugin.py").read_bytes()),
            *(
                (f"pyroute2/{file.relative_to(package)}", file.read_bytes())
                for file in sorted(package.rglob("*.py"))
            ),
        ]
        with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, content in entries:
                # A fixed date: the same sources make the same file, which is not rewritten.
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, content)
        return b"#!/usr/bin/env python3\n" + target.read_bytes()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is answered as an error: the token is not sent elsewhere


def token_prefix(token: str) -> str:
    """`cvsriov_<key id>`: names a token without its secret."""
    key_id = token.removeprefix(TOKEN_PREFIX).partition("_")[0]
    return f"{TOKEN_PREFIX}{key_id}"


def enroll(*, agent_url: str, enrollment_token: str, node_name: str, current_token: str) -> str:
    """This node's token from the agent API, for the cluster's enrollment token."""
    body = json.dumps({"node_name": node_name, "current_token": current_token}).encode()
    request = urllib.request.Request(  # noqa: S310 - the operator's agent URL
        agent_url.rstrip("/") + "/enroll/",
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {enrollment_token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        },
    )
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=ENROLL_TIMEOUT_SECONDS) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read() or b"{}").get("detail", "")
        except (ValueError, OSError, AttributeError):
            detail = ""
        raise EnrollFailed(f"HTTP {exc.code}: {detail or exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise EnrollFailed(f"agent API unreachable: {getattr(exc, 'reason', exc)}") from None
    token = answer.get("token") if isinstance(answer, dict) else None
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise EnrollFailed("the agent API answered no node token")
    return token


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def install(
    *, bin_dir: Path, conf_dir: Path, token_file: Path, node_name: str, agent_url: str
) -> list[str]:
    """Put the plugin, this node's token, its name and the agent URL in place, enrolling
    when the node has no token yet or the enrollment token changed; the files changed.
    Raises EnrollFailed (what is in place stays)."""
    changed = []
    if _write(bin_dir / PLUGIN, plugin_zip(), 0o755):
        changed.append(str(bin_dir / PLUGIN))
    conf_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(conf_dir, 0o700)
    enrollment_token = _read(token_file)
    token_path, name_path, marker = (
        conf_dir / "token",
        conf_dir / "node-name",
        conf_dir / "enrolled-with",
    )
    current = _read(token_path) if _read(name_path) == node_name else ""
    if not current or _read(marker) != token_prefix(enrollment_token):
        token = enroll(
            agent_url=agent_url,
            enrollment_token=enrollment_token,
            node_name=node_name,
            current_token=current,
        )
        for path, content, mode in (
            (token_path, token, 0o600),
            (name_path, node_name, 0o644),
            (marker, token_prefix(enrollment_token), 0o600),
        ):
            if _write(path, content.encode() + b"\n", mode):
                changed.append(str(path))
    if _write(conf_dir / "agent-url", agent_url.strip().encode() + b"\n", 0o644):
        changed.append(str(conf_dir / "agent-url"))
    return changed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin-dir", type=Path, required=True)
    parser.add_argument("--conf-dir", type=Path, required=True)
    parser.add_argument("--token-file", type=Path, required=True, help="the enrollment token")
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--agent-url", required=True, help="the agent API, as nodes reach it")
    parser.add_argument(
        "--keep-running", action="store_true", help="stay, and enroll again when the "
        "Secret's token changes (every 30 s)"
    )  # fmt: skip
    args = parser.parse_args(argv)
    while True:
        try:
            for path in install(
                bin_dir=args.bin_dir,
                conf_dir=args.conf_dir,
                token_file=args.token_file,
                node_name=args.node_name,
                agent_url=args.agent_url,
            ):
                print(f"installed {path}", flush=True)
        except EnrollFailed as exc:
            print(f"enrolling node {args.node_name}: {exc}", file=sys.stderr, flush=True)
            if not args.keep_running:
                raise SystemExit(1) from None
        if not args.keep_running:
            return
        time.sleep(30)


if __name__ == "__main__":
    main()
