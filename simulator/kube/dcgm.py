"""NVIDIA's dcgm-exporter, as the API server's proxy to one of its pods reaches it
(`GET /api/v1/namespaces/<ns>/pods/<pod>[:<port>]/proxy/metrics`).

The exporter is a DaemonSet: the pod proxied to answers for the GPUs of the node it runs
on. What those GPUs show is set through the control API
(`POST /_sim/clusters/<name>/dcgm`) as a series of samples per GPU; each scrape of a
node's exporter answers the node's next sample (the last one again once the series is
spent), so a test that scrapes once per observe pass walks through a recorded series.
The text is the exporter's: its HELP and TYPE lines, and its labels (`gpu`, `UUID`,
`pci_bus_id`, `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`, and `container`,
`namespace`, `pod` as the kubelet's pod-resources mapping fills them in).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DRIVER = "580.159.04"  # the driver of the node in ../shared/gpu-node
METRICS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util"),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "fb_free"),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb_used"),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power"),
)


class DcgmSpecError(ValueError):
    pass


@dataclass
class DcgmGpu:
    gpu: int
    uuid: str
    model: str
    pod: str
    namespace: str
    container: str
    samples: list[dict[str, float]]


@dataclass
class DcgmNode:
    gpus: list[DcgmGpu]
    scrapes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def scrape(self, hostname: str) -> str:
        """The exporter's answer for this node, at its next sample."""
        lines: list[str] = []
        for metric, text, key in METRICS:
            lines += [f"# HELP {metric} {text}", f"# TYPE {metric} gauge"]
            for gpu in self.gpus:
                if not gpu.samples:
                    continue
                sample = gpu.samples[min(self.scrapes, len(gpu.samples) - 1)]
                if key not in sample:
                    continue
                labels = ",".join(
                    f'{name}="{value}"'
                    for name, value in (
                        ("gpu", str(gpu.gpu)),
                        ("UUID", gpu.uuid),
                        ("pci_bus_id", f"00000000:{0x17 + gpu.gpu:02X}:00.0"),
                        ("device", f"nvidia{gpu.gpu}"),
                        ("modelName", gpu.model),
                        ("Hostname", hostname),
                        ("DCGM_FI_DRIVER_VERSION", DRIVER),
                        ("container", gpu.container),
                        ("namespace", gpu.namespace),
                        ("pod", gpu.pod),
                    )
                )
                value = sample[key]
                lines.append(f"{metric}{{{labels}}} {value:g}")
        self.scrapes += 1
        return "\n".join(lines) + "\n"


def dcgm_nodes(body: Any) -> dict[str, DcgmNode]:
    """The control call's body: {"nodes": {"<node>": [{"gpu": 0, "uuid": ..., "model": ...,
    "pod": ..., "namespace": ..., "container": ..., "samples": [{"util": 3, "fb_used": 0,
    "fb_free": 143000, "power": 113.86}, ...]}]}}."""
    nodes = (body or {}).get("nodes")
    if not isinstance(nodes, dict):
        raise DcgmSpecError('"nodes" must map node names to their GPUs')
    found: dict[str, DcgmNode] = {}
    for name, gpus in nodes.items():
        if not isinstance(gpus, list):
            raise DcgmSpecError(f"node {name}: a list of GPUs")
        try:
            found[name] = DcgmNode(
                [
                    DcgmGpu(
                        gpu=int(gpu["gpu"]),
                        uuid=str(gpu["uuid"]),
                        model=str(gpu.get("model") or "NVIDIA H200"),
                        pod=str(gpu.get("pod") or ""),
                        namespace=str(gpu.get("namespace") or ""),
                        container=str(gpu.get("container") or ""),
                        samples=[
                            {key: float(value) for key, value in sample.items()}
                            for sample in gpu.get("samples") or []
                        ],
                    )
                    for gpu in gpus
                ]
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DcgmSpecError(f"node {name}: a GPU that cannot be read ({exc})") from exc
    return found
