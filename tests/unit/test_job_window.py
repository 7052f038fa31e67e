"""The worker's claim-ahead window: Little's law between a floor and a ceiling."""

from __future__ import annotations

from dms.jobs.worker._window import PACE_SECONDS, ROUND_TRIPS_AHEAD, Window


def _window(floor: int = 8, ceiling: int = 1000) -> Window:
    return Window(floor=floor, ceiling=ceiling, now=0.0)


def test_a_new_window_starts_at_its_floor() -> None:
    assert _window().ahead == 8


def test_the_floor_never_exceeds_the_ceiling() -> None:
    assert _window(floor=8, ceiling=0).ahead == 0


def test_it_covers_the_round_trips_of_claims_at_the_pace_jobs_finish() -> None:
    window = _window()
    window.round_trip(0.010)
    window.round_trip(0.010)
    window.round_trip(0.010)  # smoothed towards 10 ms: 8.75 ms
    window.finished(200, now=0.1)  # 2,000 jobs/s
    assert window.ahead == round(2000 * 0.00875 * ROUND_TRIPS_AHEAD)


def test_it_grows_at_once_when_jobs_finish_faster() -> None:
    window = _window()
    window.round_trip(0.02)  # 10 ms once smoothed
    window.finished(100, now=0.1)  # 1,000 jobs/s: 40 ahead
    before = window.ahead
    window.finished(1100, now=0.2)  # 10,000 jobs/s
    assert before == 40
    assert window.ahead == 400


def test_it_shrinks_smoothly_and_not_below_its_floor() -> None:
    window = _window()
    window.round_trip(0.02)
    window.finished(1000, now=0.1)  # 10,000 jobs/s: 400 ahead
    window.finished(1000, now=0.2)  # none finished: the pace halves
    assert window.ahead == 200
    for step in range(3, 30):
        window.finished(1000, now=step / 10)
    assert window.ahead == 8


def test_it_never_passes_its_ceiling() -> None:
    window = _window(ceiling=100)
    window.round_trip(1.0)
    window.finished(100_000, now=1.0)
    assert window.ahead == 100


def test_intervals_shorter_than_the_measure_are_ignored() -> None:
    window = _window()
    window.round_trip(1.0)
    window.finished(1000, now=PACE_SECONDS / 2)
    assert window.ahead == 8
