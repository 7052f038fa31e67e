"""What the hostile-input property tests share: the values they draw, the checksum that proves
a refusal changed nothing, and the tally of outcomes printed at the end of a module.

Used by ``tests/integration/test_hostile_input.py`` (the domain's entry points) and
``tests/jobs/test_hostile_input.py`` (the queue's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import currently_in_test_context, event
from hypothesis import strategies as st
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.engine import Connection

#: Every code point, surrogates and unassigned ones included.
ANY_CHARACTER = st.characters(exclude_categories=())
#: What PostgreSQL, psycopg, LIKE, quoting, escaping and trimming make special.
SPECIAL = st.sampled_from(
    ["\x00", "\ud800", "\udfff", "\udcff", " ", "\t", "\n", "\u3000", "\u00a0", "\u200b",
     "\ufeff", "%", "_", "\\", "\\u0000", "'", '"', ";", "/", "😀", "\U0010ffff", "\x7f", "é",
     "ß", "İ"]
)  # fmt: skip
#: Values of every other type a caller might pass where text belongs.
NOT_TEXT = st.one_of(
    st.none(),
    st.integers(),
    st.floats(),
    st.binary(max_size=4),
    st.booleans(),
    st.uuids(),
    st.lists(st.integers(), max_size=2),
    st.decimals(),
    st.dates(),
    st.datetimes(),
    st.timedeltas(),
)


def texts(lengths: Iterable[int]) -> st.SearchStrategy[str]:
    """Any text, text built from :data:`SPECIAL` pieces, and text of each of ``lengths``."""
    return st.one_of(
        st.text(ANY_CHARACTER, max_size=12),
        st.lists(st.one_of(SPECIAL, st.text(ANY_CHARACTER, max_size=3)), max_size=6).map("".join),
        st.sampled_from(sorted(lengths)).map(lambda n: "x" * n),
    )


def checksums(conn: Connection, tables: Iterable[sa.Table]) -> tuple[tuple[Any, ...], ...]:
    """Name, row count and checksum of each of ``tables``, in one query on ``conn``."""
    parts = []
    for table in tables:
        rows = table.alias("r")
        as_text = sa.cast(sa.literal_column("r"), sa.Text)
        digest = sa.func.md5(
            sa.func.coalesce(
                sa.func.string_agg(as_text, aggregate_order_by(sa.literal("|"), as_text)), ""
            )
        )
        parts.append(sa.select(sa.literal(table.name), sa.func.count(), digest).select_from(rows))
    # Sorted: a UNION ALL promises no order.
    return tuple(sorted(tuple(row) for row in conn.execute(sa.union_all(*parts))))


class Tally:
    """Outcomes of a module's examples by entry point, printed at its end (without ``-n``)."""

    def __init__(self, title: str) -> None:
        """``title`` heads the printed table."""
        self.title = title
        self.counts: Counter[tuple[str, str]] = Counter()

    def outcome(self, entry: str, what: str) -> None:
        """Count an example's outcome, for hypothesis' statistics and for the table."""
        if currently_in_test_context():  # not in the tests of known values
            event(f"{entry}: {what}")
            self.counts[entry, what] += 1

    def report_after(self, request: pytest.FixtureRequest) -> Iterator[None]:
        """The body of a module's autouse fixture: clear, run the module, print the table."""
        self.counts.clear()
        yield
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        if reporter is None or capture is None or not self.counts:  # an xdist worker's
            return
        with capture.global_and_fixture_disabled():
            for line in self.lines():
                reporter.write_line(line)

    def lines(self) -> list[str]:
        """The table: per entry point, tried, accepted intact, refused (and how); then totals."""
        lines = [f"--- {self.title}: tried, accepted intact, refused (how) ---"]
        totals: Counter[str] = Counter()
        for entry in sorted({entry for entry, _ in self.counts}):
            counts = {what: n for (name, what), n in self.counts.items() if name == entry}
            accepted = sum(n for what, n in counts.items() if what.startswith("accepted"))
            refused = {what: n for what, n in counts.items() if what.startswith("refused")}
            how = ", ".join(f"{n} {what.removeprefix('refused ')}" for what, n in refused.items())
            tried = accepted + sum(refused.values())
            totals.update(tried=tried, accepted=accepted, refused=sum(refused.values()))
            lines.append(f"{entry:45} {tried:4} {accepted:4} {sum(refused.values()):4}  {how}")
        lines.append(
            f"{'total':45} {totals['tried']:4} {totals['accepted']:4} {totals['refused']:4}"
        )
        return lines
