"""Log lines of ``dms``: plain or JSON, standard-library ``logging`` only.

``dms`` logs under the ``dms`` logger hierarchy (``dms.jobs.worker``, ``dms.embedded``, ...) and
never configures logging as a library: an application keeps its own setup. Entry points (the
``dms`` command) call :func:`configure` once with the level and format of the settings
(``DMS_LOG_LEVEL``, ``DMS_LOG_FORMAT``) or of their options.

A JSON line is one object: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, any
``extra={...}`` fields of the call (a failed job attempt carries ``job_id``, ``kind``,
``tenant``, ...), and ``exception`` with the traceback when there is one. Values are escaped by
``json``, so a message holding newlines, NUL or lone surrogates stays one line.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any, Literal

#: The formats of :func:`configure`.
LogFormat = Literal["plain", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("plain", "json")
#: Level names accepted by :func:`configure` (and ``DMS_LOG_LEVEL``).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: The logger of the lines a command says to its operator (``dms.cli.output.tell``).
OPERATOR_LOGGER = "dms.cli.operator"
_PLAIN = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
#: Attributes every LogRecord has; the others came from ``extra=``.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module's docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update((k, v) for k, v in vars(record).items() if k not in _STANDARD)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        # ensure_ascii: lone surrogates and control characters become \u escapes, never raw.
        return json.dumps(line, default=str, ensure_ascii=True)


def configure(level: str, log_format: LogFormat = "plain") -> None:
    """Send log lines of ``level`` and above to stderr, as plain text or JSON.

    Replaces the handlers of the root logger: an entry point owns the process's logging. The
    lines a command says to its operator (:data:`OPERATOR_LOGGER`: ``error: ...``, how far an
    interrupted run got) go to stderr whatever ``level`` is: as they are in plain format, as
    JSON objects like every other line in JSON format.
    """
    root = logging.getLogger()
    _replace_handler(root, _handler(JsonFormatter() if log_format == "json" else _PLAIN))
    root.setLevel(level)
    operator = logging.getLogger(OPERATOR_LOGGER)
    _replace_handler(operator, _handler(JsonFormatter() if log_format == "json" else "%(message)s"))
    operator.setLevel(logging.INFO)
    operator.propagate = False


def _handler(formatter: logging.Formatter | str) -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    if isinstance(formatter, str):
        formatter = logging.Formatter(formatter)
    handler.setFormatter(formatter)
    return handler


def _replace_handler(logger: logging.Logger, handler: logging.Handler) -> None:
    for existing in logger.handlers[:]:
        logger.removeHandler(existing)
    logger.addHandler(handler)
