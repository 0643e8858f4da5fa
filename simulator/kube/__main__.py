"""``python -m simulator.kube``: serve the fake Kubernetes API until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

from simulator.kube.joiner import Joiner
from simulator.kube.scheduler import Scheduler
from simulator.kube.server import KubeHTTPServer, Simulator
from simulator.kube.tls import certificates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulator.kube",
        description="Serve fake Kubernetes API servers (one per simulated cluster, under "
        "/clusters/<name>) and their control API (/_sim/).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8082, help="0 picks a free port")
    parser.add_argument("--seed", type=int, default=0, help="seed for faults without their own")
    parser.add_argument(
        "--cluster",
        action="append",
        default=[],
        metavar="NAME",
        help="a cluster to serve from the start (repeatable); more with POST /_sim/clusters",
    )
    parser.add_argument(
        "--join-whitesky",
        metavar="URL",
        help="the demo: running VMs of this whitesky simulator named capvco-<cluster>-... "
        "join the clusters served here as nodes (simulator/kube/joiner.py)",
    )
    parser.add_argument(
        "--join-interval", type=float, default=2.0, help="seconds between two joiner passes"
    )
    parser.add_argument(
        "--join-demo-pods",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the joiner also makes the demo pods of namespace ml (--no-join-demo-pods: "
        "a benchmark plays pods of its own)",
    )
    parser.add_argument(
        "--schedule",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="run a scheduler and kubelets: pending pods are bound to nodes that fit them, "
        "then run, and finish after their sim.capvco.io/run-seconds "
        "(simulator/kube/scheduler.py)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="the scheduler's delays and run-seconds are divided by this (a benchmark "
        "compresses a day into minutes)",
    )
    parser.add_argument(
        "--tls-dir",
        metavar="DIR",
        help="where its CA (ca.crt, the one to trust) and server certificate are kept, "
        "made when missing, and the kubeconfig of each --cluster (NAME.kubeconfig); "
        "default: a temporary directory, removed at exit",
    )
    args = parser.parse_args(argv)
    if args.time_scale <= 0:
        parser.error("--time-scale must be a positive number")

    with tempfile.TemporaryDirectory(prefix="kube-simulator-tls-") as scratch:
        return _serve(args, Path(args.tls_dir or scratch))


def _serve(args: argparse.Namespace, tls_dir: Path) -> int:
    found = certificates(tls_dir, args.host)
    simulator = Simulator(seed=args.seed, ca_pem=found.ca_pem)
    server = KubeHTTPServer((args.host, args.port), simulator, found.server_context())
    host, port = str(server.server_address[0]), int(server.server_address[1])
    for name in args.cluster:
        described = simulator.control_cluster_add(name, f"{host}:{port}")
        # For kubectl: `kubectl --kubeconfig DIR/NAME.kubeconfig get nodes` (JSON is YAML).
        kubeconfig_file = tls_dir / f"{name}.kubeconfig"
        kubeconfig_file.write_text(json.dumps(described["kubeconfig"], indent=2))
        kubeconfig_file.chmod(0o600)

    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    serving = threading.Thread(target=server.serve_forever, name="kube-http", daemon=True)
    serving.start()
    if args.join_whitesky:
        joiner = Joiner(
            simulator,
            args.join_whitesky,
            interval=args.join_interval,
            demo_pods=args.join_demo_pods,
        )
        threading.Thread(target=joiner.run, args=(stop,), name="joiner", daemon=True).start()
    if args.schedule:
        scheduler = Scheduler(simulator, time_scale=args.time_scale)
        threading.Thread(target=scheduler.run, args=(stop,), name="scheduler", daemon=True).start()
    print(f"kube simulator listening on https://{host}:{port}", flush=True)
    print(f"kube simulator CA certificate: {found.ca_file}", flush=True)
    while not stop.wait(timeout=1.0):
        pass
    server.shutdown()
    server.server_close()
    print("kube simulator stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
