"""What a container on a simulated GPU node prints: `nvidia-smi`'s CSV query and CUDA's
vectorAdd sample, in the formats the real tools print them (../shared/gpu-node holds what
a real H200 node printed).

The GPUs a container sees are those the device plugin gave it: its `nvidia.com/gpu` limit.
What they are comes from the node's labels, as NVIDIA's GPU feature discovery sets them
(`nvidia.com/gpu.product`, `nvidia.com/gpu.memory`, `nvidia.com/cuda.driver.major`,
`.minor`, `.rev`), else from the GPU type label the control plane sets
(`capvco.io/gpu-type`). A node's annotations make it lie, for tests:

* `sim.capvco.io/gpu-model`: the guest sees this model instead;
* `sim.capvco.io/gpus-hidden`: this many of the container's GPUs are not seen;
* `sim.capvco.io/driver`: this driver version, or `none` (no driver: nvidia-smi fails).
"""

from __future__ import annotations

import hashlib
import shlex
import uuid
from typing import Any

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
GPU_TYPE_LABEL = "capvco.io/gpu-type"
MODEL = "sim.capvco.io/gpu-model"
HIDDEN = "sim.capvco.io/gpus-hidden"
DRIVER = "sim.capvco.io/driver"
DEFAULT_DRIVER = "550.127.05"
# MiB as nvidia-smi reports them, for cards named without a memory label.
MEMORY_MIB = {
    "H200": 143771, "H100": 81559, "A100": 81920, "A10": 23028, "L40S": 46068, "L4": 23034,
    "T4": 15360, "V100": 32768,
}  # fmt: skip
COMPUTE_CAP = {
    "H200": "9.0", "H100": "9.0", "A100": "8.0", "A10": "8.6", "L40S": "8.9", "L4": "8.9",
    "T4": "7.5", "V100": "7.0",
}  # fmt: skip
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
    "that the latest NVIDIA driver is installed and running.\n"
)
# Header names and units of the fields nvidia-smi's --query-gpu prints (its --help-query-gpu).
UNITS = {"memory.total": "MiB", "memory.used": "MiB", "memory.free": "MiB",
         "utilization.gpu": "%", "utilization.memory": "%", "power.draw": "W"}  # fmt: skip


def model_of(node: Obj) -> str:
    meta = node["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    if annotations.get(MODEL):
        return str(annotations[MODEL])
    if product := labels.get("nvidia.com/gpu.product"):
        return str(product).replace("-", " ")  # feature discovery writes spaces as hyphens
    return str(labels.get(GPU_TYPE_LABEL) or "NVIDIA GPU")


def driver_of(node: Obj) -> str:
    """The node's driver version; "" when it has none."""
    meta = node["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    if DRIVER in annotations:
        value = str(annotations[DRIVER])
        return "" if value == "none" else value
    parts = [labels.get(f"nvidia.com/cuda.driver.{p}") for p in ("major", "minor", "rev")]
    return ".".join(p for p in parts if p) if all(parts[:2]) else DEFAULT_DRIVER


def gpus_seen(node: Obj, limit: int) -> int:
    hidden = (node["metadata"].get("annotations") or {}).get(HIDDEN) or "0"
    try:
        return max(0, limit - int(hidden))
    except ValueError:
        return limit


def _model_word(model: str) -> str:
    words = [w for w in model.replace("-", " ").split() if w.upper() not in ("NVIDIA", "TESLA")]
    return words[0].upper() if words else ""


def _fields(node: Obj, model: str, index: int) -> dict[str, str]:
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    word = _model_word(model)
    memory = labels.get("nvidia.com/gpu.memory") or MEMORY_MIB.get(word)
    digest = hashlib.sha256(f"{name}/{index}".encode()).hexdigest()
    return {
        "index": str(index),
        "name": model,
        "uuid": f"GPU-{uuid.UUID(digest[:32])}",
        "pci.bus_id": f"00000000:{6 + index:02X}:00.0",
        "driver_version": driver_of(node),
        "memory.total": str(memory) if memory else "[N/A]",
        "memory.used": "0",
        "mig.mode.current": "Disabled" if word in ("A100", "H100", "H200") else "[N/A]",
        "compute_cap": COMPUTE_CAP.get(word, "[N/A]"),
        "utilization.gpu": "0",
    }


def nvidia_smi_query(node: Obj, limit: int, argv: list[str]) -> tuple[int, str]:
    """`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`: exit code, output."""
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), "")
    formats = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "")
    if not query or "csv" not in formats.split(","):
        return 2, 'Invalid combination of input arguments. Please run "nvidia-smi -h" for help.\n'
    if not driver_of(node):
        return 9, NO_DRIVER
    names = [f.strip() for f in query.split(",")]
    noheader, nounits = "noheader" in formats, "nounits" in formats
    seen = gpus_seen(node, limit)
    if not seen:
        return 6, "No devices were found\n"
    lines = []
    if not noheader:
        lines.append(", ".join(f"{n} [{UNITS[n]}]" if n in UNITS else n for n in names))
    model = model_of(node)
    for index in range(seen):
        values = _fields(node, model, index)
        row = []
        for n in names:
            value = str(seen) if n == "count" else values.get(n, "[N/A]")
            if n in UNITS and not nounits and value != "[N/A]":
                value = f"{value} {UNITS[n]}"
            row.append(value)
        lines.append(", ".join(row))
    return 0, "\n".join(lines) + "\n"


def vector_add(node: Obj, limit: int) -> tuple[int, str]:
    """CUDA's vectorAdd sample (the image's own command)."""
    if not driver_of(node) or not gpus_seen(node, limit):
        return 1, (
            "[Vector addition of 50000 elements]\n"
            "Failed to allocate device vector A (error code CUDA driver version is "
            "insufficient for CUDA runtime version)!\n"
        )
    return 0, (
        "[Vector addition of 50000 elements]\n"
        "Copy input data from the host memory to the CUDA device\n"
        "CUDA kernel launch with 196 blocks of 256 threads\n"
        "Copy output data from the CUDA device to the host memory\n"
        "Test PASSED\n"
        "Done\n"
    )


def run(container: Obj, node: Obj) -> tuple[int, str]:
    """What the container prints on the node, and its exit code."""
    limits = (container.get("resources") or {}).get("limits") or {}
    try:
        limit = int(str(limits.get(GPU, "0")))
    except ValueError:
        limit = 0
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    if len(argv) == 1:
        argv = shlex.split(argv[0])
    if argv and argv[0].rsplit("/", 1)[-1] == "nvidia-smi":
        return nvidia_smi_query(node, limit, argv[1:])
    if "vectoradd" in str(container.get("image", "")).lower() or (
        argv and argv[0].rsplit("/", 1)[-1] == "vectorAdd"
    ):
        return vector_add(node, limit)
    return 0, ""
