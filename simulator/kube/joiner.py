"""The demo's nodes: VMs of a whitesky simulator become nodes.

``python -m simulator.kube --cluster demo --join-whitesky http://127.0.0.1:8081`` polls the
whitesky simulator's state (``GET /_sim/state``) every few seconds and, for each cluster
served here, does what kubeadm join, the kubelet and the device plugin would:

* a RUNNING VM named ``capvco-<cluster>-...`` is a Ready node of that cluster, named after
  the VM, with ``spec.providerID`` ``vco://<location>/<vm id>``; a HALTED one is NotReady;
  one that is gone (or deleted) takes its node with it;
* a node advertises ``nvidia.com/gpu`` (its VM's vGPUs) only once a device plugin
  DaemonSet (an image of ``k8s-device-plugin``) exists and the node carries the GPU type
  label the DaemonSet selects (``capvco.io/gpu-type``): as the real device plugin would;
* a few demo pods ask for GPUs (namespace ``ml``), made again when gone; the scheduler
  (simulator/kube/scheduler.py) places them.

Labels and annotations that others set on a node are kept; nothing is written when nothing
changed, so the cluster's resourceVersion moves only on a real change.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import urllib.request
from typing import Any

from simulator.kube.resources import DAEMONSETS, NODES, PODS
from simulator.kube.server import Simulator
from simulator.kube.store import ClusterState

logger = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
GPU_TYPE_LABEL = "capvco.io/gpu-type"
# The demo's workloads ask for nodes whose GPUs a pod was seen to use (docs/guides/gpu.md,
# "What is verified and how"): the verification's Job gets the node's GPUs first.
VERIFIED_LABEL = "capvco.io/gpu-verified"
DEVICE_PLUGIN_IMAGE = "k8s-device-plugin"
DEMO_NAMESPACE = "ml"
# name: (GPU type label value it asks for, or "" for any; GPUs)
DEMO_PODS = {
    "train-a100-0": ("nvidia-a100", 1),
    "train-a100-1": ("nvidia-a100", 1),
    "infer-t4-0": ("nvidia-t4", 1),
    "train-big": ("nvidia-a100", 2),
}
Obj = dict[str, Any]


def whitesky_state(url: str, timeout: float = 5.0) -> Obj:
    with urllib.request.urlopen(f"{url.rstrip('/')}/_sim/state", timeout=timeout) as answer:  # noqa: S310 - the demo's own simulator
        state: Obj = json.load(answer)
    return state


def cluster_join(state: ClusterState, world: Obj, *, demo_pods: bool = True) -> None:
    """One pass over one cluster: its nodes from the VMs of `world` (the whitesky
    simulator's state), then the demo pods (unless `demo_pods` is false: a benchmark
    plays pods of its own). Call with the simulator's lock held."""
    prefix = f"capvco-{state.name}-"
    locations = {cs["cloudspace_id"]: cs["location"] for cs in world.get("cloudspaces", [])}
    vms = {
        vm["name"]: vm
        for vm in world.get("vms", [])
        if vm["name"].startswith(prefix) and vm["status"] in ("RUNNING", "HALTED")
    }
    plugin = _device_plugin_applied(state)
    nodes = state.objects[NODES.storage_key]
    for _, name in list(nodes):
        if name.startswith(prefix) and name not in vms:
            state.delete(NODES, "", name)
    for name, vm in sorted(vms.items()):
        old = nodes.get(("", name))
        location = locations.get(str(vm["cloudspace_id"]), "")
        _put_if_changed(state, old, _node(name, vm, location, old, plugin))
    if demo_pods:
        _demo_pods(state)


def _device_plugin_applied(state: ClusterState) -> bool:
    for daemonset in state.objects[DAEMONSETS.storage_key].values():
        pod = (daemonset.get("spec") or {}).get("template", {}).get("spec", {})
        if any(DEVICE_PLUGIN_IMAGE in str(c.get("image", "")) for c in pod.get("containers", [])):
            return True
    return False


def _node(name: str, vm: Obj, location: str, old: Obj | None, plugin: bool) -> Obj:
    skeleton: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {}}
    node = copy.deepcopy(old) if old else skeleton
    meta: Obj = node["metadata"]
    meta["name"] = name
    meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/hostname": name}
    node["spec"] = {**(node.get("spec") or {}), "providerID": f"vco://{location}/{vm['vm_id']}"}
    capacity = {
        "cpu": str(vm.get("vcpus", 4)),
        "memory": f"{vm.get('memory', 8192)}Mi",
        "pods": "110",
    }
    gpus = len(vm.get("vgpu_ids") or [])
    if plugin and gpus and GPU_TYPE_LABEL in meta["labels"]:
        capacity[GPU] = str(gpus)
    ready = vm["status"] == "RUNNING"
    node["status"] = {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "conditions": [
            {"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}
        ],
        "nodeInfo": {
            "kubeletVersion": "v1.33.1",
            "kubeProxyVersion": "",
            "architecture": "amd64",
            "operatingSystem": "linux",
            "osImage": "Ubuntu 24.04 LTS",
            "kernelVersion": "6.8.0",
            "containerRuntimeVersion": "containerd://1.7.24",
            "bootID": name,
            "machineID": name,
            "systemUUID": name,
        },
    }
    return node


def _put_if_changed(state: ClusterState, old: Obj | None, new: Obj) -> None:
    if old is not None and _content(old) == _content(new):
        return
    state.put(new)


def _content(obj: Obj) -> Obj:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


def _demo_pods(state: ClusterState) -> None:
    """The demo pods, made when missing: the scheduler (``--schedule``) places them on
    verified nodes of their type, and deletes one whose node went, to be made again here."""
    pods = state.objects[PODS.storage_key]
    for name, (gpu_type, gpus) in DEMO_PODS.items():
        if (DEMO_NAMESPACE, name) not in pods:
            state.put(_pod(name, gpu_type, gpus))


def _pod(name: str, gpu_type: str, gpus: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": DEMO_NAMESPACE, "labels": {"app": "demo"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": {"limits": {GPU: str(gpus)}},
                }
            ],
            "nodeSelector": {
                VERIFIED_LABEL: "true",
                **({GPU_TYPE_LABEL: gpu_type} if gpu_type else {}),
            },
        },
        "status": {"phase": "Pending"},
    }


class Joiner:
    """Runs `cluster_join` for every cluster served, every `interval` seconds, until
    `stop` is set. A whitesky simulator that does not answer is tried again next time."""

    def __init__(
        self,
        simulator: Simulator,
        whitesky_url: str,
        *,
        interval: float = 2.0,
        demo_pods: bool = True,
    ):
        self.simulator = simulator
        self.whitesky_url = whitesky_url
        self.interval = interval
        self.demo_pods = demo_pods

    def step(self) -> None:
        world = whitesky_state(self.whitesky_url)
        with self.simulator.lock:
            for state in self.simulator.clusters.values():
                cluster_join(state, world, demo_pods=self.demo_pods)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except (OSError, ValueError) as exc:
                logger.warning("joiner: whitesky simulator at %s: %s", self.whitesky_url, exc)
            stop.wait(self.interval)
