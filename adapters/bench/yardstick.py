"""How fast the machine runs during a phase: one fixed piece of work, timed now and then.

A shared machine's speed moves between two phases of one run: here the floor's own CPU
for the same work moved by a fifth and more within the hour (docs/performance.md), with
no steal time and nothing else running in the machine — the host's other guests share
its cores and caches. Every process then needs more CPU for the same work, so a CPU
ratio of two phases mixes what the code does with how fast the machine ran. The bench
runs this in a process of its own beside each phase: every `PERIOD` it times `WORK`
(CPU time, not wall: a wait for the CPU does not count, a slower CPU does) and prints
it. The median over the phase is the phase's yardstick; two phases' yardsticks say how
much the machine's speed moved between them, apart from anything the bed did.

It costs about 1 % of a core, the same in both phases, and is not counted in the bed.

    python adapters/bench/yardstick.py     # one line per sample (CPU microseconds)
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the sampler itself imports nothing heavy: it starts in a blink
    from adapters.bench.processes import Process

__all__ = ["PERIOD", "SCRIPT", "Yardstick", "work"]

SCRIPT = Path(__file__)  # run as a script (`main`)
PERIOD = 0.25  # seconds between samples
_SAMPLE = {
    "metadata": {"name": "order-0000", "labels": {"app": "llm", "tier": "serving"}},
    "status": {"conditions": [{"type": t, "status": "True"} for t in ("Ready", "Planned")]},
}


def work() -> int:
    """The fixed work: what the bed's processes do most (parse, build, hash, loop)."""
    total = 0
    for index in range(80):
        copy = json.loads(json.dumps(_SAMPLE))
        copy["metadata"]["name"] = f"order-{index:04d}"
        total += len({str(k): v for k, v in copy.items()}) + hash(copy["metadata"]["name"]) % 7
        total += sum(i * i for i in range(200))
    return total


class Yardstick:
    """The sampler as a child process of the bench, from `start` to `stop`."""

    def __init__(self, process: Process) -> None:
        self._process = process

    @classmethod
    def start(cls, process: Process) -> Yardstick:
        """`process`: this file run as a script (`main`); returns
        once it has taken its first sample, so the phase is measured from its start."""
        process.start().wait_line("", 30)
        return cls(process)

    def stop(self) -> float:
        """The median CPU microseconds of the work over the samples taken (NaN: none)."""
        self._process.stop()
        samples = []
        for _, line in self._process.lines:
            with contextlib.suppress(ValueError):  # a line cut short by the stop
                samples.append(float(line))
        return round(statistics.median(samples), 1) if samples else float("nan")


def main() -> None:
    next_at = time.monotonic()
    while True:
        started = time.process_time_ns()
        work()
        try:
            sys.stdout.write(f"{(time.process_time_ns() - started) / 1000:.1f}\n")
            sys.stdout.flush()
        except BrokenPipeError:  # the bench is gone
            return
        next_at += PERIOD
        time.sleep(max(0.0, next_at - time.monotonic()))


if __name__ == "__main__":
    main()
