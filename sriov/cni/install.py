"""Install the CNI plugin on a node (run by the DaemonSet of sriov/manifests.py, as root,
with the host's CNI directories mounted): the plugin as one executable zip (with pyroute2
inside, so the node needs only python3), the agent token, the node's name and the agent
API's URL, which the plugin reads from that directory alone.

No Django in here.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import zipfile
from pathlib import Path

PLUGIN = "capvco-sriov"


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


def install(
    *, bin_dir: Path, conf_dir: Path, token_file: Path, node_name: str, agent_url: str
) -> list[str]:
    """Put the plugin, the token, the node name and the agent URL in place; the files
    changed."""
    changed = []
    if _write(bin_dir / PLUGIN, plugin_zip(), 0o755):
        changed.append(str(bin_dir / PLUGIN))
    if _write(conf_dir / "token", token_file.read_bytes().strip() + b"\n", 0o600):
        changed.append(str(conf_dir / "token"))
    if _write(conf_dir / "node-name", node_name.encode() + b"\n", 0o644):
        changed.append(str(conf_dir / "node-name"))
    if _write(conf_dir / "agent-url", agent_url.strip().encode() + b"\n", 0o644):
        changed.append(str(conf_dir / "agent-url"))
    return changed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin-dir", type=Path, required=True)
    parser.add_argument("--conf-dir", type=Path, required=True)
    parser.add_argument("--token-file", type=Path, required=True)
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--agent-url", required=True, help="the agent API, as nodes reach it")
    parser.add_argument(
        "--keep-running", action="store_true", help="stay, and install a new token when the "
        "Secret changes (every 30 s)"
    )  # fmt: skip
    args = parser.parse_args(argv)
    while True:
        for path in install(
            bin_dir=args.bin_dir,
            conf_dir=args.conf_dir,
            token_file=args.token_file,
            node_name=args.node_name,
            agent_url=args.agent_url,
        ):
            print(f"installed {path}", flush=True)
        if not args.keep_running:
            return
        time.sleep(30)


if __name__ == "__main__":
    main()
