"""`ai-inference bench`: what the controller costs beside the floor, in one run, on this
machine (docs/performance.md). `run` holds the phases; `bed` what they share, `measuring`
what they read off the bed, `processes` the simulator and the controller they start;
`bed_only` and `large_log` are the two optional figures."""

from adapters.bench.bed import BenchOptions, bench_capacity
from adapters.bench.measuring import request_counts
from adapters.bench.run import Benchmark, plane_folder, run_bench

__all__ = [
    "BenchOptions",
    "Benchmark",
    "bench_capacity",
    "plane_folder",
    "request_counts",
    "run_bench",
]
