"""Benchmark: the controller's CPU per probe of a Ready order, with nothing else running.

With hundreds of Ready orders the probes are the controller's idle cost (issue 11: 500
orders probed every 30 s are 17 probes a second, so under 2 % of a core leaves ~1 ms of
CPU a probe). This measures that cost on the real code path, against the simulator's
stub runtimes (`adapters/simulator/stub.py`, each on its own port of 127.0.0.1, with an
API key) served by a child process, so the CPU counted (`time.process_time`, this
process only) is the prober's alone:

- `direct`: `probe()` on every stub in turn, `--rounds` times (no timer, no threads);
- `kept`: the memory each kept connection costs (a new prober probes every stub once;
  `tracemalloc` and `VmRSS`, per origin);
- `timer`: every stub probed on the background timer, as `acting.py` arms it
  (`Background.repeat` on the controller's 1 s grain, `--grain 0` for none; the answer
  turned into a `ProbeResult` and judged by `probe_is_news` against a Ready order's
  state), each every `--every` seconds for `--seconds`: the CPU of the whole window
  (timer, pool, locks, idle waits) divided by the probes made.

    .venv/bin/python benchmarks/probes.py                       # 100 stubs, both modes
    .venv/bin/python benchmarks/probes.py --stubs 500 --mode timer --every 30 --seconds 90
    .venv/bin/python benchmarks/probes.py --mode direct --profile 25   # top 25 by cumtime

It prints one JSON line per mode: probes, failed probes, CPU ms per probe, wall ms per
probe, and the share of a core the probes would take at `--orders` Ready orders probed
every `--interval` seconds (the controller's Ready period: 3 x probe.intervalSeconds).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import subprocess
import sys
import threading
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adapters.kubernetes.background import Background  # noqa: E402 - after the path set-up
from adapters.probes import http  # noqa: E402
from fsm import observations as ob  # noqa: E402
from fsm.decide import probe_is_news  # noqa: E402
from fsm.state import OrderState  # noqa: E402

TOKEN = "bench-token-0123456789abcdef0123456789abcdef"

# The child: N stubs with an API key, their URLs on stdout, until stdin closes.
_SERVE = """
import json, sys
from adapters.simulator.stub import Stub
stubs = [Stub(served_names=["bench"], api_key=sys.argv[2]) for _ in range(int(sys.argv[1]))]
print(json.dumps([s.url for s in stubs]), flush=True)
sys.stdin.read()
"""


def _serve(count: int) -> tuple[subprocess.Popen[str], list[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(count), TOKEN],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    urls: list[str] = json.loads(child.stdout.readline())
    return child, urls


# The controller's prober (kept connections); code from before it had only `probe()`.
_PROBE = http.Prober().probe if hasattr(http, "Prober") else http.probe


_inside = [0.0]  # CPU seconds spent inside `_call`, over every thread
_inside_lock = threading.Lock()


def _call(url: str, timeout: float, at: datetime) -> ob.ProbeResult:
    """What `Actor._probe` arms: the probe, its answer as an observation."""
    cpu = time.thread_time()
    answer = _PROBE(url, TOKEN, timeout=timeout)
    result = ob.ProbeResult(at=at, ok=answer.ok, status_code=answer.status_code, error=answer.error)
    cpu = time.thread_time() - cpu
    with _inside_lock:
        _inside[0] += cpu
    return result


def kept(urls: list[str], timeout: float) -> dict[str, float]:
    """Memory a kept connection costs: a new Prober probes every stub once (each keeps
    its connection); `tracemalloc` (the Python heap) and `VmRSS` per origin kept."""
    prober = http.Prober()
    prober.probe(urls[0], TOKEN, timeout=timeout)  # the code's first use: not counted
    gc.collect()
    tracemalloc.start()
    heap, rss = tracemalloc.get_traced_memory()[0], _rss()
    failed = sum(not prober.probe(url, TOKEN, timeout=timeout).ok for url in urls[1:])
    gc.collect()
    heap, rss = tracemalloc.get_traced_memory()[0] - heap, _rss() - rss
    tracemalloc.stop()
    prober.close()
    origins = max(1, len(urls) - 1)
    return {
        "probes": origins,
        "failed": failed,
        "cpu_s": 0.0,
        "wall_s": 0.0,
        "heap_bytes_per_origin": heap / origins,
        "rss_bytes_per_origin": rss / origins,
    }


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def direct(urls: list[str], rounds: int, timeout: float) -> dict[str, float]:
    at = datetime.now(UTC)
    failed = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        for url in urls:
            failed += not _call(url, timeout, at).ok
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    probes = rounds * len(urls)
    return {"probes": probes, "failed": failed, "cpu_s": cpu, "wall_s": wall}


def timer(
    urls: list[str], every: float, seconds: float, timeout: float, grain: float, *, workers: int
) -> dict[str, float]:
    """Every stub on the background timer, first probes spread over `every` as after a
    restart; the window starts once the first round has run (connections made)."""
    ready = OrderState(probe_ok=True, ever_ready=True, last_probe_at=datetime.now(UTC))
    counts = {"probes": 0, "failed": 0}
    lock = threading.Lock()
    woken: list[str] = []
    # Code from before the grain had none: pass it only when asked for.
    extra: dict[str, Any] = {"grain": grain} if grain else {}
    background = Background(woken.append, workers=workers, **extra)
    at = datetime.now(UTC)

    def news(result: ob.ProbeResult) -> bool:
        with lock:
            counts["probes"] += 1
            counts["failed"] += not result.ok
        return probe_is_news(ready, result)

    for i, url in enumerate(urls):
        background.repeat(
            ("probe", f"uid-{i}"),
            lambda url=url: _call(url, timeout, at),  # type: ignore[misc]
            every=every,
            first_after=every * i / len(urls),
            news=news,
        )
    time.sleep(every + 0.5)  # one round: every connection made (if any is kept)
    with lock:
        start = dict(counts)
    inside = _inside[0]
    cpu, wall = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    inside = _inside[0] - inside
    with lock:
        probes = counts["probes"] - start["probes"]
        failed = counts["failed"] - start["failed"]
    background.stop()
    return {
        "probes": probes,
        "failed": failed,
        "cpu_s": cpu,
        "cpu_in_probes_s": inside,  # the rest: timer, pool, judging the answer
        "wall_s": wall,
        "woken": len(woken),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stubs", type=int, default=100, help="stub runtimes (origins)")
    parser.add_argument("--mode", choices=["direct", "timer", "both", "kept"], default="both")
    parser.add_argument("--rounds", type=int, default=5, help="direct: probes of each stub")
    parser.add_argument("--every", type=float, default=5.0, help="timer: seconds between probes")
    parser.add_argument("--seconds", type=float, default=30.0, help="timer: the window")
    parser.add_argument(
        "--grain", type=float, default=1.0, help="timer: the background's (the controller's 1)"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="probe.timeoutSeconds")
    parser.add_argument("--workers", type=int, default=8, help="timer: the background's threads")
    parser.add_argument("--orders", type=int, default=500, help="Ready orders to project to")
    parser.add_argument("--interval", type=float, default=30.0, help="their probe period, s")
    parser.add_argument("--profile", type=int, default=0, help="direct: print the top N")
    args = parser.parse_args()

    child, urls = _serve(args.stubs)
    try:
        modes = ["direct", "timer"] if args.mode == "both" else [args.mode]
        for mode in modes:
            profiler = cProfile.Profile() if args.profile and mode == "direct" else None
            if profiler is not None:
                profiler.enable()
            if mode == "kept":
                figures = kept(urls, args.timeout)
            elif mode == "direct":
                figures = direct(urls, args.rounds, args.timeout)
            else:
                figures = timer(
                    urls, args.every, args.seconds, args.timeout, args.grain, workers=args.workers
                )
            if profiler is not None:
                profiler.disable()
            probes = max(1, int(figures["probes"]))
            cpu_ms = 1000 * figures["cpu_s"] / probes
            rate = args.orders / args.interval
            sys.stdout.write(
                json.dumps(
                    {
                        "mode": mode,
                        "stubs": len(urls),
                        **{k: round(v, 3) for k, v in figures.items()},
                        "cpu_ms_per_probe": round(cpu_ms, 3),
                        "wall_ms_per_probe": round(1000 * figures["wall_s"] / probes, 3),
                        "projected": f"{args.orders} orders / {args.interval:g} s",
                        "projected_core_fraction": round(rate * cpu_ms / 1000, 4),
                    }
                )
                + "\n"
            )
            sys.stdout.flush()
            if profiler is not None:
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(
                    args.profile
                )
                sys.stdout.write(out.getvalue())
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
