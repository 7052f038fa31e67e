"""Write :mod:`dms.aio.repositories`, the typed twins of the repositories, from their source.

::

    python -m dms.aio._generate   # then ruff sorts its imports and formats it

At run time a repository's twin is an :class:`~dms.aio.uow.AsyncRepositoryProxy`, which
awaits the synchronous methods themselves; for a type checker each twin is a protocol whose
methods are the repository's, ``async def``, with the same parameters, defaults, annotations
and docstrings. They are generated rather than written: ``tests/unit/test_async_api.py`` fails
when a repository's methods and its twin's differ, and this writes the twin again.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from dms.aio.uow import repository_kinds
from dms.repositories._base import Repository

TARGET = Path(__file__).with_name("repositories.py")
#: The longest line the generated code aims at (ruff formats the rest).
WIDTH = 100

HEADER = '''# AsyncRepositories' properties have no body: type checkers read them, nothing runs.
# mypy: disable-error-code="empty-body"
"""The awaitable twins of the repositories, typed: generated, do not edit.

Written by ``python -m dms.aio._generate`` from the repositories' source (formatted by
ruff); ``tests/unit/test_async_api.py`` fails when a twin's methods differ from its
repository's. Type checkers read :class:`AsyncRepositories` as the repositories of a
:class:`~dms.aio.AsyncUnitOfWork`; at run time each is an
:class:`~dms.aio.uow.AsyncRepositoryProxy` that awaits the synchronous method. A method that
returns an iterator (read in pages as it is consumed) returns an async iterator here, each
step awaited: ``async for event in await uow.audit.exported(...)``.
"""

from __future__ import annotations

'''


def twin_name(kind: type[Repository]) -> str:
    """The name of ``kind``'s twin: ``DocumentRepository`` -> ``AsyncDocumentRepository``."""
    return f"Async{kind.__name__}"


def generate() -> str:
    """The source of :mod:`dms.aio.repositories` as the repositories read now."""
    imports: dict[str, set[str]] = {}  # a module -> the names taken from it ("" for itself)
    classes = [_twin(kind, imports) for kind in _kinds()]
    properties = "\n\n".join(
        f"    @property\n    def {name}(self) -> {twin_name(kind)}:\n"
        f'        """The twin of :attr:`dms.uow.UnitOfWork.{name}`."""'
        for name, kind in sorted(repository_kinds().items())
    )
    # A plain class, not a protocol: AsyncUnitOfWork inherits it for type checkers only, and
    # the members of a protocol inherited explicitly would count as abstract.
    unit = (
        "class AsyncRepositories:\n"
        '    """The repositories of an AsyncUnitOfWork, awaited."""\n\n' + properties + "\n"
    )
    imports.setdefault("typing", set()).add("Protocol")
    return HEADER + _import_lines(imports) + "\n\n" + "\n\n".join([*classes, unit])


def _kinds() -> list[type[Repository]]:
    return sorted(set(repository_kinds().values()), key=lambda kind: kind.__name__)


def _twin(kind: type[Repository], imports: dict[str, set[str]]) -> str:
    module = sys.modules[kind.__module__]
    tree = ast.parse(inspect.getsource(module))
    (node,) = (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == kind.__name__)
    known = _imported_names(tree, module)
    methods = [
        _method(function, module, known, imports)
        for function in node.body
        if isinstance(function, ast.FunctionDef) and not function.name.startswith("_")
    ]
    doc = f'    """The awaitable twin of :class:`{kind.__module__}.{kind.__name__}`."""'
    return f"class {twin_name(kind)}(Protocol):\n{doc}\n\n" + "\n\n".join(methods) + "\n"


def _method(
    function: ast.FunctionDef,
    module: ModuleType,
    known: dict[str, tuple[str, str | None]],
    imports: dict[str, set[str]],
) -> str:
    returned = function.returns
    if isinstance(returned, ast.Subscript) and _is_iterator(returned):
        returned = returned.slice  # it becomes an AsyncIterator: only what it holds is needed
    for name in _names(function.args, returned):
        _need(name, module, known, imports)
    parameters = ast.unparse(function.args)
    returns = f" -> {_awaited(function.returns, imports)}" if function.returns else ""
    head = _signature(function.name, parameters, returns)
    docstring = ast.get_docstring(function, clean=False)
    # The docstring as written: the twin's method sits at the same depth as the repository's.
    node = function.body[0]
    body = ast.get_source_segment(inspect.getsource(module), node)
    if docstring is None or body is None:
        raise SystemExit(f"{module.__name__}.{function.name} has no docstring to copy")
    return head + "\n" + " " * node.col_offset + body


def _awaited(returns: ast.expr, imports: dict[str, set[str]]) -> str:
    """The twin's return annotation: an ``Iterator[X]`` becomes an ``AsyncIterator[X]``."""
    text = ast.unparse(returns)
    if _is_iterator(returns):
        imports.setdefault("collections.abc", set()).add("AsyncIterator")
        return "Async" + text
    return text


def _is_iterator(returns: ast.expr | None) -> bool:
    return isinstance(returns, ast.Subscript) and ast.unparse(returns.value) == "Iterator"


def _signature(name: str, parameters: str, returns: str) -> str:
    """``async def`` on one line if it fits, else the parameters on one line or one each."""
    one_line = f"    async def {name}({parameters}){returns}:"
    if len(one_line) <= WIDTH:
        return one_line
    inner = f"        {parameters}"
    if len(inner) <= WIDTH:
        return f"    async def {name}(\n{inner}\n    ){returns}:"
    each = ",\n".join(f"        {part}" for part in _split(parameters))
    return f"    async def {name}(\n{each},\n    ){returns}:"


def _split(parameters: str) -> list[str]:
    """The top-level comma-separated parts of a parameter list."""
    parts, depth, current = [], 0, ""
    for char in parameters:
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()]


def _names(arguments: ast.arguments, returns: ast.expr | None) -> set[str]:
    """The names an annotation or a default refers to (the root of ``a.b.c``)."""
    nodes: list[ast.AST] = [arguments] if returns is None else [arguments, returns]
    return {node.id for tree in nodes for node in ast.walk(tree) if isinstance(node, ast.Name)} - {
        "self"
    }


def _imported_names(tree: ast.Module, module: ModuleType) -> dict[str, tuple[str, str | None]]:
    """Each name the module imports: (the module it is imported from, its name there)."""
    package = module.__name__.rsplit(".", 1)[0]
    found: dict[str, tuple[str, str | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                line = alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"
                found[alias.asname or alias.name] = (line, None)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                source = f"{package}.{source}" if source else package
            for alias in node.names:
                found[alias.asname or alias.name] = (source, alias.name)
    return found


def _need(
    name: str,
    module: ModuleType,
    known: dict[str, tuple[str, str | None]],
    imports: dict[str, set[str]],
) -> None:
    if hasattr(builtins, name):
        return
    if name not in known:  # defined in the repository's module: an alias, a constant
        imports.setdefault(module.__name__, set()).add(name)
        return
    source, original = known[name]
    if original is None:
        imports.setdefault("", set()).add(source)  # import uuid
    elif not any(name in taken for taken in imports.values()):  # the first module that has it
        imports.setdefault(source, set()).add(name if original == name else f"{original} as {name}")


def _import_lines(imports: dict[str, set[str]]) -> str:
    plain = [f"import {name}" for name in sorted(imports.pop("", set()))]
    taken = [
        f"from {source} import {', '.join(sorted(names))}"
        for source, names in sorted(imports.items())
    ]
    return "\n".join([*plain, *taken]) + "\n"


def main() -> None:
    """Write the twins to :data:`TARGET`, then sort its imports and format it with ruff."""
    TARGET.write_text(generate())
    ruff = [sys.executable, "-m", "ruff"]
    fix = [*ruff, "check", "--fix", "-q", "--select", "I,F401", str(TARGET)]
    subprocess.run(fix, check=True)  # noqa: S603 - our own interpreter and file
    subprocess.run([*ruff, "format", "-q", str(TARGET)], check=True)  # noqa: S603 - as above
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
