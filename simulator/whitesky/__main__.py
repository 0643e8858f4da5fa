"""``python -m simulator.whitesky``: serve the simulator until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from simulator.whitesky.server import Simulator, SimulatorHTTPServer
from simulator.whitesky.worldfile import DEMO_WORLD, WorldError, load_world_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulator.whitesky",
        description="Serve a simulated whitesky.cloud VCO API (/api/1), IAM and control API.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081, help="0 picks a free port")
    parser.add_argument("--world", type=Path, default=DEMO_WORLD, help="world file (JSON)")
    parser.add_argument(
        "--state", type=Path, help="save state here after each change; load at start"
    )
    parser.add_argument("--token-ttl", type=int, default=3600, help="JWT lifetime in seconds")
    parser.add_argument("--seed", type=int, default=0, help="seed for faults without their own")
    args = parser.parse_args(argv)
    if args.token_ttl < 1:
        parser.error("--token-ttl must be at least 1")

    try:
        simulator = Simulator(
            load_world_file(args.world),
            state_path=args.state,
            token_ttl=args.token_ttl,
            seed=args.seed,
        )
    except (WorldError, ValueError, KeyError, OSError) as exc:
        print(f"whitesky simulator: {exc}", file=sys.stderr)
        return 2
    server = SimulatorHTTPServer((args.host, args.port), simulator)
    host, port = str(server.server_address[0]), int(server.server_address[1])

    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    serving = threading.Thread(target=server.serve_forever, name="whitesky-http", daemon=True)
    serving.start()
    print(f"whitesky simulator listening on http://{host}:{port}", flush=True)
    while not stop.wait(timeout=1.0):
        pass
    server.shutdown()
    server.server_close()
    print("whitesky simulator stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
