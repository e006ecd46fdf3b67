"""The bench's arithmetic of a project phase against its floor, and of several rounds."""

from __future__ import annotations

import pytest

from adapters.bench.measuring import compared, medians


def _phase(wall: float, **cpu: float) -> dict[str, object]:
    bed = {"apiserver_etcd": 0.0, "controller": 0.0, "bench": 0.0}
    return {"wall_s": wall, "cpu_s": {**bed, **cpu}}


def test_a_project_is_compared_by_wall_by_the_beds_cpu_and_by_the_same_work() -> None:
    floor = _phase(40.0, apiserver_etcd=40.0, bench=8.0, controller_manager=10.0, simulator=10.0)
    # The machine ran a tenth slower in the project's phase: the same work says so.
    project = _phase(
        52.0, apiserver_etcd=55.0, controller=20.0, controller_manager=11.0, simulator=11.0
    )
    assert compared(floor, project) == {
        "ratio_to_floor": 1.3,
        "cpu_ratio_to_floor": round(97 / 68, 2),
        "same_work_cpu_ratio_to_floor": 1.1,
        "cpu_ratio_to_floor_at_one_speed": round(97 / 68 / 1.1, 2),
    }


@pytest.mark.parametrize(
    ("ratios", "median"),
    [([1.5], 1.5), ([1.3, 1.9], 1.6), ([1.72, 1.25, 1.3], 1.3)],
)
def test_the_rounds_give_each_figures_median(ratios: list[float], median: float) -> None:
    rounds = [
        {"ratio_to_floor": r, "project_wall_s": 10 * r, "project_cpu_s": {"controller": r}}
        for r in ratios
    ]
    assert medians(rounds) == {"ratio_to_floor": median, "project_wall_s": round(10 * median, 2)}
