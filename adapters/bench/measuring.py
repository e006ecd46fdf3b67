"""What the bench reads off the bed: CPU and memory from /proc, requests from the API
server's own `apiserver_request_total`, and the arithmetic of per-order figures."""

from __future__ import annotations

import math
import os
import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient

__all__ = [
    "Requests",
    "busy_cores",
    "compared",
    "cpu_seconds",
    "gets_between",
    "medians",
    "per_order",
    "percentile",
    "request_counts",
    "requests_between",
    "status_bytes",
    "writes_between",
]

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far, from /proc (no psutil)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def busy_cores(before: Mapping[str, float], after: Mapping[str, float], wall: float) -> float:
    """How many cores the bed's processes kept busy on average over `wall` seconds."""
    return round(sum(after[k] - before[k] for k in after) / wall, 2) if wall else 0.0


def status_bytes(pid: int, field: str) -> int:
    """A memory figure of the process's /proc status (VmHWM: the peak resident set,
    VmRSS: the current one), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


Requests = Counter[tuple[str, str, str, bool]]


def request_counts(api: ApiClient) -> Requests:
    """`apiserver_request_total` by (resource, subresource, verb, answered 2xx), from
    /metrics."""
    request = api.param_serialize(
        "GET", "/metrics", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(*request, _request_timeout=(10, 60))
    text = response.read().decode()
    counts: Requests = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line.rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        resource = labels.get("resource", "")
        accepted = labels.get("code", "").startswith("2")
        counts[(resource, labels.get("subresource", ""), labels.get("verb", ""), accepted)] += int(
            float(value)
        )
    return counts


def writes_between(before: Requests, after: Requests, *, accepted: bool = True) -> dict[str, int]:
    """Write requests made in between, as {"resource[/sub] VERB": count}: those the
    server accepted (2xx), or with `accepted=False` those it refused (a 409 AlreadyExists
    or Conflict is a request made for nothing)."""
    return requests_between(before, after, verbs=WRITE_VERBS, accepted=accepted)


def gets_between(before: Requests, after: Requests) -> dict[str, int]:
    """Reads of one object by name made in between (LISTs and WATCHes apart), found or
    not, as {"resource[/sub] GET": count}."""
    return requests_between(before, after, verbs=frozenset({"GET"}), accepted=None)


def requests_between(
    before: Requests, after: Requests, *, verbs: frozenset[str], accepted: bool | None
) -> dict[str, int]:
    """Requests of `verbs` made in between, by "resource[/sub] VERB": answered 2xx, or not
    (`accepted=False`), or either (None)."""
    out: dict[str, int] = {}
    for (resource, sub, verb, ok), count in after.items():
        delta = count - before.get((resource, sub, verb, ok), 0)
        if (accepted is None or ok == accepted) and verb in verbs and delta > 0:
            name = f"{resource}/{sub} {verb}" if sub else f"{resource} {verb}"
            out[name] = out.get(name, 0) + delta
    return dict(sorted(out.items()))


def per_order(counts: Mapping[str, int], orders: int) -> dict[str, float]:
    return {k: round(v / orders, 2) for k, v in counts.items()}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# The controller manager and the simulator do nearly the same work in both phases (the
# same Deployments, ReplicaSets, pods and claims): their CPU, phase against phase, is how
# much the machine's own speed moved between them. Nearly: the project adds the
# controller's probes, and its slower pace costs the controller manager a few more status
# writes (docs/performance-journal.md, "A fifth machine").
SAME_WORK = ("controller_manager", "simulator")


def compared(floor: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, float]:
    """A project phase against the floor phase before it: the walls; the CPU of the whole
    bed (with both phases keeping the cores busy, the wall follows the work, and this is
    the ratio the noise of a shared machine moves least); and the same work's CPU, which,
    well away from 1, says the two ratios moved with the machine rather than the code."""
    floor_cpu, project_cpu = floor["cpu_s"], project["cpu_s"]
    cpu_ratio = sum(project_cpu.values()) / sum(floor_cpu.values())
    same_work = sum(project_cpu[k] for k in SAME_WORK) / sum(floor_cpu[k] for k in SAME_WORK)
    return {
        "ratio_to_floor": round(project["wall_s"] / floor["wall_s"], 2),
        "cpu_ratio_to_floor": round(cpu_ratio, 2),
        "same_work_cpu_ratio_to_floor": round(same_work, 2),
        # The CPU ratio with the machine's speed taken out, the same work as its gauge:
        # over twelve rounds here it held at 1.26-1.31 while the wall ratio went from
        # 0.95 to 1.67 (docs/performance.md, "The controller beside the floor, in
        # rounds"). A little low, if anything: the project's same work is a little more
        # than the floor's.
        "cpu_ratio_to_floor_at_one_speed": round(cpu_ratio / same_work, 2),
    }


def medians(rounds: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each figure's median over the rounds (the first round's numbers, by key)."""
    numbers = [k for k, v in rounds[0].items() if isinstance(v, int | float)]
    return {key: round(statistics.median(r[key] for r in rounds), 2) for key in numbers}
