"""The GPU job trace bench_autoscale replays, and the world it runs in: seeded, so two
runs (and the three policies of one run) see the same jobs.

A day of arrivals whose rate follows office hours (a trough at night, a peak in the
afternoon) with bursts (a team submits a sweep: several jobs within minutes), durations
spread from minutes to hours (log-uniform), requests of 1, 2 and 4 GPUs of two types.
The world has the two types in two locations, each with cards for a part of the trace's
peak only, the second location dearer.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

# Pools' GPU types, as whitesky's cards name them and as pods select them.
TYPES = {"NVIDIA A100": "nvidia-a100", "NVIDIA L40S": "nvidia-l40s"}
TYPE_SHARE = {"NVIDIA A100": 0.6, "NVIDIA L40S": 0.4}
GPUS_SHARE = {1: 0.6, 2: 0.25, 4: 0.15}
# Two locations: the first cheaper (whitesky's monthly price of a vGPU unit).
LOCATIONS = {"bench-nl-dc01-001": 300.0, "bench-be-dc01-001": 390.0}
INSTANCES_PER_CARD = 4
MACHINE_SIZES = (1, 4)  # GPUs per machine: a pool of each per type and location
DAY = 86400.0


@dataclass(frozen=True)
class Job:
    name: str
    at: float  # trace seconds after the start
    seconds: float  # how long it runs
    gpus: int
    gpu_type: str  # the pool's type ("NVIDIA A100")

    @property
    def label(self) -> str:
        return TYPES[self.gpu_type]


def daily_rate(at: float) -> float:
    """The arrival rate's shape over a day (`at` seconds after midnight), 0.15 at 03:00
    to 1 at 15:00."""
    hour = (at % DAY) / 3600
    return 0.15 + 0.85 * (0.5 - 0.5 * math.cos(2 * math.pi * (hour - 3) / 24))


def trace_make(
    *,
    seed: int,
    hours: float,
    jobs_per_day: int,
    bursts_per_day: int,
    from_hour: float = 0.0,
    shortest: float = 300.0,
    longest: float = 4 * 3600.0,
) -> list[Job]:
    """Arrivals by thinning a Poisson process to the daily shape (the trace starts at
    `from_hour` o'clock), plus bursts of 4 to 8 jobs within 3 minutes; each job's
    duration log-uniform in [shortest, longest]."""
    rng = random.Random(seed)
    span = hours * 3600
    peak_rate = jobs_per_day / DAY / 0.575  # the shape's mean is 0.575 of its peak
    arrivals: list[float] = []
    at = 0.0
    while True:
        at += rng.expovariate(peak_rate)
        if at >= span:
            break
        if rng.random() < daily_rate(at + from_hour * 3600):
            arrivals.append(at)
    for _ in range(max(1, round(bursts_per_day * hours / 24))):
        start = rng.uniform(0, span * 0.9)
        arrivals += [start + rng.uniform(0, 180) for _ in range(rng.randint(4, 8))]
    jobs = []
    for n, at in enumerate(sorted(arrivals)):
        seconds = math.exp(rng.uniform(math.log(shortest), math.log(longest)))
        gpus = rng.choices(list(GPUS_SHARE), weights=list(GPUS_SHARE.values()))[0]
        gpu_type = rng.choices(list(TYPE_SHARE), weights=list(TYPE_SHARE.values()))[0]
        jobs.append(Job(f"job-{n:04d}", round(at, 1), round(seconds, 1), gpus, gpu_type))
    return jobs


def peak_gpus(jobs: list[Job]) -> dict[str, int]:
    """Per type, the most GPUs the trace's jobs ask for at once (each from its arrival)."""
    peaks = {}
    for gpu_type in TYPES:
        events = sorted(
            [(j.at, j.gpus) for j in jobs if j.gpu_type == gpu_type]
            + [(j.at + j.seconds, -j.gpus) for j in jobs if j.gpu_type == gpu_type]
        )
        current = peak = 0
        for _, delta in events:
            current += delta
            peak = max(peak, current)
        peaks[gpu_type] = peak
    return peaks


def cards_for(peaks: dict[str, int]) -> dict[str, int]:
    """Cards per type in each location: 70% of the peak, so that neither location holds
    the peak alone and both together hold it with some room."""
    return {t: math.ceil(0.7 * peak / INSTANCES_PER_CARD) + 1 for t, peak in peaks.items()}


def world_make(peaks: dict[str, int]) -> dict[str, Any]:
    cards = cards_for(peaks)
    locations = []
    for n, (name, price) in enumerate(LOCATIONS.items()):
        locations.append(
            {
                "name": name,
                "account_id": 2000 + n,
                "prices": {"vgu": price},
                "gpu_cards": [
                    {
                        "vendor": "NVIDIA",
                        "model": gpu_type.split()[-1],
                        "cards": cards[gpu_type],
                        "instances_per_card": INSTANCES_PER_CARD,
                    }
                    for gpu_type in TYPES
                ],
                "external_networks": [
                    {
                        "external_network_id": 2000 + n,
                        "name": f"ext-{n}",
                        "cidr": f"10.8{n}.0.0/24",
                        "gateway": f"10.8{n}.0.1",
                    }
                ],
                "images": [{"image_id": 200 + n, "name": "Ubuntu 24.04"}],
                "cloudspaces": [
                    {
                        "cloudspace_id": f"cs-bench-{n}",
                        "name": f"bench-{n}",
                        "private_network": f"10.{130 + n}.0.0/16",
                    }
                ],
            }
        )
    return {
        "customer": {"customer_id": "cust-bench", "name": "Bench"},
        "currency": "EUR",
        "locations": locations,
    }


def static_sizes(peaks: dict[str, int], cards: dict[str, int]) -> dict[tuple[str, str, int], int]:
    """Static pools sized for the trace's peak, as a person would: 4-GPU machines enough
    for the peak of each type, the cheaper location filled first."""
    sizes: dict[tuple[str, str, int], int] = {}
    per_location = {t: n * INSTANCES_PER_CARD // 4 for t, n in cards.items()}
    for gpu_type, peak in peaks.items():
        needed = math.ceil(peak / 4)
        for location in LOCATIONS:
            take = min(needed, per_location[gpu_type])
            sizes[(gpu_type, location, 4)] = take
            needed -= take
    return sizes
