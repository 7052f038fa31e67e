"""The queue's SQL files (dms/jobs/sql) are what its Core expressions render (dms/jobs/rendered.py):
a reviewer who reads a file reads what PostgreSQL receives."""

from __future__ import annotations

from importlib import resources

import pytest

from dms.jobs import rendered


@pytest.mark.parametrize("name", sorted(rendered.STATEMENTS))
def test_each_file_is_what_its_expression_renders(name: str) -> None:
    text = rendered.checked_in(name)

    assert text is not None, f"dms/jobs/sql/{name}.sql is missing: python -m dms.jobs.rendered"
    header, _, statement = text.partition("\n")
    assert header.startswith(f"-- dms.jobs: {name},")
    assert rendered.same_statement(statement.rstrip().removesuffix(";"), rendered.compiled(name)), (
        f"dms/jobs/sql/{name}.sql is not what its expression renders: python -m dms.jobs.rendered"
    )


def test_every_file_belongs_to_a_statement() -> None:
    files = resources.files("dms.jobs") / rendered.SQL_DIRECTORY
    names = {
        entry.name.removesuffix(".sql") for entry in files.iterdir() if entry.name.endswith(".sql")
    }

    assert names == set(rendered.STATEMENTS)


def test_the_claim_skips_what_others_hold() -> None:
    # The queue's contract, as the file says it: claimed rows are locked, locked rows skipped.
    claim = rendered.checked_in("claim")

    assert claim is not None
    assert "FOR UPDATE SKIP LOCKED" in claim
    assert "UPDATE dms.processing_jobs" in claim


def test_whitespace_is_all_that_may_differ() -> None:
    assert rendered.same_statement("SELECT  1\n FROM t", "SELECT 1 FROM t")
    assert not rendered.same_statement("SELECT 1 FROM t", "SELECT 2 FROM t")
