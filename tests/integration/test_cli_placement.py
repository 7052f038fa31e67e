"""``dms tenants move`` and the nodes in ``dms status``, on plain PostgreSQL and on Citus.

Plain PostgreSQL has one server: the move is one line on stderr and exit status 1, and
``dms status`` names no node. On Citus the move happens, and ``dms status`` names the node of
every tenant and counts the tenants of each node.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import citus, placement
from dms.cli import main
from dms.schema.shared import tenants


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def _shard_nodes(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return [node.name for node in citus.nodes(conn) if node.holds_shards]


@pytest.mark.plain_only
def test_move_is_one_line_off_citus(
    engine: Engine, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["--database-url", _url(engine), "tenants", "move", tenant, "--to", "h:1"])

    assert status == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: not a Citus cluster: every tenant lives on the one server"
    ]


@pytest.mark.citus_only
def test_move_moves_on_citus(
    engine: Engine, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    here = placement.tenant_nodes(engine)[tenant].name
    there = next(name for name in _shard_nodes(engine) if name != here)

    status = main(["--database-url", _url(engine), "tenants", "move", tenant, "--to", there])

    assert status == 0
    assert capsys.readouterr().out.splitlines() == [f"moved tenant {tenant} from {here} to {there}"]
    assert placement.tenant_nodes(engine)[tenant].name == there


def test_move_to_a_node_that_is_not_in_the_cluster_is_one_line(
    engine: Engine, tenant: str, on_citus: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["--database-url", _url(engine), "tenants", "move", tenant, "--to", "h:1"])

    assert status == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ")
    assert ("no node 'h:1'" in line) == on_citus


def _status_of(engine: Engine, tenant: str, capsys: pytest.CaptureFixture[str]) -> tuple[Any, Any]:
    main(["--database-url", _url(engine), "status", "--json"])
    document = json.loads(capsys.readouterr().out)
    [mine] = [item for item in document["tenants"] if item["tenant"] == tenant]
    return document, mine


@pytest.mark.plain_only
def test_status_names_no_node_off_citus(
    engine: Engine, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    document, mine = _status_of(engine, tenant, capsys)

    assert "node" not in mine
    assert "nodes" not in document


@pytest.mark.citus_only
def test_status_names_each_tenants_node_on_citus(
    engine: Engine, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    document, mine = _status_of(engine, tenant, capsys)

    assert mine["node"] == placement.tenant_nodes(engine)[tenant].name
    assert sum(document["nodes"].values()) == len(placement.tenant_nodes(engine))
    with engine.connect() as conn:
        registered = conn.scalar(sa.select(sa.func.count()).select_from(tenants))
    assert len(document["tenants"]) == registered
