"""The JSON a NewJob writes of itself when it is made: the same as the encoder's, or refused."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dms import jobs
from dms.errors import ValidationError
from dms.jobs import validation
from dms.jobs.enqueue import DEFAULT_MAX_ATTEMPTS

_PLAIN_VALUES = st.one_of(st.text(), st.integers(), st.booleans(), st.none())


@given(st.dictionaries(st.text(), _PLAIN_VALUES, max_size=8))
def test_a_flat_payload_is_written_as_the_encoder_writes_it(payload: dict[str, Any]) -> None:
    assert validation.flat_json(payload) == validation._STRICT_JSON.encode(payload)


class _Key(str):
    __slots__ = ()


class _Number(enum.IntEnum):
    ONE = 1


@pytest.mark.parametrize(
    "payload",
    [
        [1],
        "s",
        3,
        {"f": 1.5},
        {"l": []},
        {"d": {}},
        {"t": (1,)},
        {1: "one"},
        {None: 1},
        {_Key("k"): 1},
        {"e": _Number.ONE},
        {"ok": 1, "f": 2.5},
    ],
)
def test_any_other_payload_is_left_to_the_encoder(payload: object) -> None:
    assert validation.flat_json(payload) is None


def test_an_integer_python_will_not_write_is_refused() -> None:
    with pytest.raises(ValidationError, match="not JSON-serialisable"):
        validation.require_json({"n": 10**5000})


def test_the_defaults_are_written_as_the_same_numbers_given() -> None:
    default = jobs.NewJob(kind="k", payload={"n": 1}, tenant="acme")
    given_again = jobs.NewJob(
        kind="k", payload={"n": 1}, tenant="acme", priority=-0, max_attempts=25 * 1
    )
    assert default._fields_json == given_again._fields_json
    written = json.loads("{" + default._fields_json + "}")
    assert written == {
        "tenant": "acme",
        "kind": "k",
        "payload": {"n": 1},
        "priority": 0,
        "max_attempts": DEFAULT_MAX_ATTEMPTS,
    }


@pytest.mark.parametrize(
    "numbers",
    [{"priority": False}, {"max_attempts": 25.0}, {"priority": 0.0}, {"max_attempts": True}],
    ids=["priority False", "max_attempts 25.0", "priority 0.0", "max_attempts True"],
)
def test_values_equal_to_the_defaults_are_still_refused(numbers: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="must be an integer"):
        jobs.NewJob(kind="k", payload={}, tenant="acme", **numbers)
