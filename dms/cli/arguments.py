"""Types of command-line arguments: each parses one value or says in one line why not."""

from __future__ import annotations

import argparse
import json
import re
from datetime import datetime, timedelta
from typing import Any

from dms.jobs.model import JobState

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: A duration: a number (decimals allowed) and its unit, nothing else. No unit, no default:
#: ``--older-than 5`` would mean five seconds to one reader and five days to another.
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])")
#: The forms of a duration, as ``--help`` texts and refusals name them.
DURATION_FORMS = "a number and its unit: 45s, 15m, 12h, 30d (1.5h too)"
#: The highest TCP port.
MAX_PORT = 65535


def duration(text: str) -> timedelta:
    """Parse a number and its unit: ``45s``, ``15m``, ``12h``, ``30d`` (``1.5h`` too).

    A number alone is refused, whatever it is: there is no default unit.
    """
    match = _DURATION.fullmatch(text)
    if match is not None:
        try:
            return timedelta(seconds=float(match[1]) * _UNITS[match[2]])
        except OverflowError:  # beyond timedelta's 999,999,999 days: no duration at all
            pass
    raise argparse.ArgumentTypeError(f"not a duration: {text!r} ({DURATION_FORMS})")


def job_state(text: str) -> str:
    """Parse the name of a job state (``queued``, ``running``, ...)."""
    known = [state.value for state in JobState]
    if text not in known:
        raise argparse.ArgumentTypeError(f"unknown state {text!r} (one of {', '.join(known)})")
    return text


def positive(text: str) -> int:
    """Parse an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def port(text: str) -> int:
    """Parse a TCP port: an integer from 1 to 65535."""
    value = positive(text)
    if value > MAX_PORT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_PORT}, not {value}")
    return value


def json_value(text: str) -> Any:
    """Parse a JSON document (a job's payload)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    except RecursionError:
        raise argparse.ArgumentTypeError("not JSON that can be read: nested too deeply") from None


def moment(text: str) -> datetime:
    """Parse an ISO 8601 date and time with its UTC offset (``2026-12-24T18:00+01:00``)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 date and time: {text!r} (try 2026-12-24T18:00:00+00:00)"
        ) from None
    if value.utcoffset() is None:
        raise argparse.ArgumentTypeError(f"give a UTC offset: {text!r} (e.g. +00:00)")
    return value


def add_blobs_option(parser: argparse.ArgumentParser) -> None:
    """``--blobs``: the blob store of a command that reads or writes revisions' bytes."""
    parser.add_argument(
        "--blobs",
        metavar="DIR|s3://BUCKET/PREFIX",
        help="the blob store (default DMS_BLOBS, else a folder of this database's own under "
        "DMS_DATA_DIR/blobs)",
    )
