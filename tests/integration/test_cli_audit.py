"""``dms audit``: what an operator sees when sealing, verifying, exporting and pruning."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dms import citus, tenancy
from dms.cli import main
from dms.schema import tenant as t
from dms.uow import UnitOfWork

DMS = (sys.executable, "-m", "dms")


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _dms(database_url: URL, *arguments: str) -> int:
    return main(["--database-url", _url(database_url), *arguments])


def _tags(engine: Engine, tenant: str, user_id: uuid.UUID, *names: str) -> None:
    for name in names:
        with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
            uow.tags.add(name=name)
            uow.commit()


def test_verify_says_intact_then_where_the_chain_broke(
    database_url: URL,
    engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _tags(engine, tenant, user_id, "a", "b", "c")

    assert _dms(database_url, "audit", "verify", "--tenant", tenant) == 0
    intact = capsys.readouterr().out
    with engine.begin() as conn:
        routed = tenancy.route(conn, tenant)
        if not citus.set_local_on_every_node(routed, {"session_replication_role": "replica"}):
            routed.execute(
                sa.select(sa.func.set_config("session_replication_role", "replica", True))
            )
        routed.execute(sa.update(t.audit_events).where(t.audit_events.c.seq == 2).values(after={}))
    status = _dms(database_url, "audit", "verify", "--tenant", tenant)
    broken = capsys.readouterr().out

    assert intact == f"tenant {tenant}: intact; 3 event(s) checked, 0 not sealed yet\n"
    assert status == 1
    assert broken.startswith(f"tenant {tenant}: BROKEN at event 2: event 2 (id ")
    assert broken.endswith("; 1 event(s) checked, 0 not sealed yet\n")


def test_seal_then_verify_without_sealing(
    database_url: URL,
    engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _tags(engine, tenant, user_id, "a", "b")

    assert _dms(database_url, "audit", "verify", "--tenant", tenant, "--no-seal", "--json") == 0
    before = json.loads(capsys.readouterr().out)
    assert _dms(database_url, "audit", "seal", "--tenant", tenant) == 0
    sealed = capsys.readouterr().out

    assert (before["intact"], before["checked"], before["unsealed"]) == (True, 0, 2)
    assert sealed == f"sealed 2 event(s) of tenant {tenant}\n"


def test_export_writes_json_lines_to_a_file_or_stdout(
    database_url: URL, engine: Engine, tenant: str, user_id: uuid.UUID, tmp_path: Path
) -> None:
    _tags(engine, tenant, user_id, "a")
    cut = datetime.now(timezone.utc)
    _tags(engine, tenant, user_id, "b", "c")
    target = tmp_path / "trail.jsonl"
    export = ["audit", "export", "--tenant", tenant]

    assert _dms(database_url, *export, "--output", str(target)) == 0
    since = subprocess.run(
        [*DMS, "--database-url", _url(database_url), *export, "--since", cut.isoformat()],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    everything = [json.loads(line) for line in target.read_text().splitlines()]
    lines = [json.loads(line) for line in since.stdout.splitlines()]

    assert [e["after"]["name"] for e in everything] == ["a", "b", "c"]
    assert [e["after"]["name"] for e in lines] == ["b", "c"]
    assert {e["actor_id"] for e in everything} == {str(user_id)}


def test_prune_needs_yes_counts_in_a_dry_run_and_keeps_the_rest_verifiable(
    database_url: URL,
    engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _tags(engine, tenant, user_id, "a", "b")
    cut = datetime.now(timezone.utc).isoformat()
    _tags(engine, tenant, user_id, "c")
    prune = ["audit", "prune", "--tenant", tenant, "--before", cut]

    refused = _dms(database_url, *prune)
    refusal = capsys.readouterr().err
    assert _dms(database_url, *prune, "--dry-run") == 0
    dry = capsys.readouterr().out
    assert _dms(database_url, *prune, "--yes") == 0
    done = capsys.readouterr().out
    assert _dms(database_url, "audit", "verify", "--tenant", tenant) == 0
    verified = capsys.readouterr().out

    assert refused == 1
    assert f"refusing to prune 2 event(s) of 1 tenant(s) before {cut} without --yes" in refusal
    assert dry.endswith(f"would prune 2 event(s) of 1 tenant(s) before {cut}\n")
    assert done.startswith(f"tenant {tenant}: 2 event(s) through 2\n")
    assert (
        verified
        == f"tenant {tenant}: intact; 1 event(s) checked after checkpoint 2, 0 not sealed yet\n"
    )


def test_reads_on_and_off(
    database_url: URL, engine: Engine, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _dms(database_url, "audit", "reads", "--tenant", tenant, "on") == 0
    with UnitOfWork(engine, tenant=tenant) as uow:
        on = uow.audit.settings().record_reads
    assert _dms(database_url, "audit", "reads", "--tenant", tenant, "off") == 0
    with UnitOfWork(engine, tenant=tenant) as uow:
        off = uow.audit.settings().record_reads

    assert (on, off) == (True, False)
    assert capsys.readouterr().out.splitlines() == [
        f"tenant {tenant}: reading a revision's content is recorded",
        f"tenant {tenant}: reading a revision's content is not recorded",
    ]


@pytest.mark.parametrize(
    "mistake",
    [
        (["audit", "verify", "--tenant", "no_such_tenant"], 1, "does not exist"),
        (["audit", "export", "--tenant", "no_such_tenant", "--output", "{tmp}/x"], 1, "exist"),
        (["audit", "verify", "--tenant", "Bad Name"], 1, "invalid tenant name"),
        (["audit", "seal", "--tenant", "no_such_tenant"], 1, "does not exist"),
        (["audit", "export", "--tenant", "x", "--since", "2026-01-01"], 2, "UTC offset"),
        (["audit", "prune", "--tenant", "x"], 2, "one of the arguments"),
        (["audit", "prune", "--tenant", "x", "--older-than", "soon"], 2, "duration"),
        (["audit", "reads", "--tenant", "x", "maybe"], 2, "invalid choice"),
    ],
)
def test_mistakes_get_one_line(
    database_url: URL,
    mistake: tuple[list[str], int, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    words, status, said = mistake
    arguments = [argument.replace("{tmp}", str(tmp_path)) for argument in words]
    if status == 2:
        with pytest.raises(SystemExit) as exited:
            _dms(database_url, *arguments)
        assert exited.value.code == 2
    else:
        assert _dms(database_url, *arguments) == status
    assert said in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # a failed export leaves no file
