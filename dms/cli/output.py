"""How commands print: plain lines for people, one JSON document with ``--json`` for machines."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import logging
import sys
import uuid
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from dms.logs import OPERATOR_LOGGER


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Give a command the ``--json`` flag."""
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document instead of lines"
    )


def tell(line: str, *, level: int = logging.ERROR) -> None:
    """Say ``line`` to the operator on stderr: as it is, or as a JSON log line when asked.

    Errors (``error: ...``) are ``ERROR``; how far an interrupted run got is ``WARNING``.
    """
    logging.getLogger(OPERATOR_LOGGER).log(level, line)


def confirmed(args: argparse.Namespace, action: str, consequence: str = "") -> bool:
    """Whether the operator agreed to ``action`` (it destroys): ``--yes``, or ``yes`` typed.

    ``action`` reads after "refusing to" (``drop 'acme' and all its data``); ``consequence``
    says what it destroys when the action alone does not. A terminal is asked (on stderr,
    the answer read from stdin); anything else is refused with one line that names ``--yes``,
    so that a script never waits for an answer.
    """
    if args.yes:
        return True
    detail = f": {consequence}" if consequence else ""
    if sys.stdin.isatty() and sys.stderr.isatty():
        sys.stderr.write(f"{action[0].upper()}{action[1:]}{detail}.\nType yes to go on: ")
        sys.stderr.flush()
        if sys.stdin.readline().strip().lower() == "yes":
            return True
        tell("nothing done: the answer was not yes")
        return False
    tell(f"refusing to {action} without --yes{detail}")
    return False


def emit_json(value: Any) -> None:
    """Print ``value`` as one JSON document on stdout (dataclasses, enums, ids, times included)."""
    json.dump(value, sys.stdout, default=_plain, ensure_ascii=False)
    sys.stdout.write("\n")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID | Decimal | Path):
        return str(value)
    if isinstance(value, frozenset | set | tuple):
        return list(value)
    raise TypeError(f"cannot print {type(value).__name__} as JSON")
