"""The arithmetic backoff policy, on its own (no database)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dms.errors import ValidationError
from dms.jobs import Backoff

seconds = st.floats(min_value=0, max_value=10_000, allow_nan=False)


@given(initial=seconds, step=seconds, extra=seconds, failure=st.integers(1, 10_000))
def test_delay_is_arithmetic_and_capped(
    initial: float, step: float, extra: float, failure: int
) -> None:
    policy = Backoff(initial_seconds=initial, step_seconds=step, maximum_seconds=initial + extra)
    delay = policy.delay(failure)
    assert delay == timedelta(seconds=min(initial + step * (failure - 1), initial + extra))
    assert policy.delay(failure + 1) >= delay
    assert Backoff.from_json(policy.to_json()) == policy


@pytest.mark.parametrize(
    "arguments",
    [
        {"initial_seconds": -1},
        {"step_seconds": float("inf")},
        {"initial_seconds": 100, "maximum_seconds": 10},
    ],
)
def test_bad_policies_are_refused(arguments: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        Backoff(**arguments)


def test_failures_count_from_one() -> None:
    with pytest.raises(ValidationError):
        Backoff().delay(0)
