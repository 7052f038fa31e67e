"""``dms folders create|list|tree``: a tenant's folder tree from the command line.

A folder is named by its id or by its path of names from the top level (``Archive/2026``,
ignoring case), as ``dms import --into`` names it. A path with an empty name (``a//b``), a
``.`` or ``..``, or a control character is refused, never mended: it is a typo for some path,
and reading it as another (``a/b``) would act on a folder not meant.
"""

from __future__ import annotations

import argparse
import uuid
from collections import defaultdict

from dms.cli.context import EXIT_OK, Context
from dms.cli.output import add_json_flag, emit_json
from dms.domain import Folder
from dms.domain.audit import OPERATOR
from dms.domain.validation import check_folder_path
from dms.errors import NotFound
from dms.uow import UnitOfWork


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``folders`` to ``commands``."""
    folders = commands.add_parser("folders", help="create and list a tenant's folders")
    folder_commands = folders.add_subparsers(dest="folders_command", required=True)
    create = folder_commands.add_parser(
        "create", help="create a folder path (Archive/2026), the missing folders of it"
    )
    create.add_argument("path", help="folder names from the top level, separated by /")
    create.add_argument("--tenant", required=True, help="the tenant")
    create.add_argument(
        "--user", required=True, type=uuid.UUID, help="id of the user who creates them"
    )
    add_json_flag(create)
    create.set_defaults(run=_create)
    for name, help_text, run in (
        ("list", "the folders directly in a folder (default: the top level)", _list),
        ("tree", "every folder below a folder (default: the whole tenant), indented", _tree),
    ):
        listing = folder_commands.add_parser(name, help=help_text)
        listing.add_argument("--tenant", required=True, help="the tenant")
        listing.add_argument("--in", dest="within", help="the folder: its id or its path")
        add_json_flag(listing)
        listing.set_defaults(run=run)


def resolve_folder(uow: UnitOfWork, named: str | None) -> uuid.UUID | None:
    """The folder ``named`` (an id, or a path of names from the top level); ``None``: top level.

    Raises :class:`NotFound` if a name on the path is not there, :class:`ValidationError` if
    the path names no folder or is no path of folder names (:func:`check_folder_path`).
    """
    if named is None:
        return None
    try:
        by_id = uuid.UUID(named)
    except ValueError:
        pass
    else:
        return uow.folders.get(by_id).id
    folder_id: uuid.UUID | None = None
    for name in check_folder_path(named):
        children = {child.name.lower(): child.id for child in uow.folders.children(folder_id)}
        found = children.get(name.lower())
        if found is None:
            raise NotFound(f"no folder {name!r} on the path {named!r} of tenant {uow.tenant}")
        folder_id = found
    return folder_id


def _create(ctx: Context, args: argparse.Namespace) -> int:
    created: list[Folder] = []
    names = check_folder_path(args.path)  # before any SQL
    with UnitOfWork(ctx.engine, tenant=args.tenant, user_id=args.user) as uow:
        parent: uuid.UUID | None = None
        for name in names:
            existing = {child.name.lower(): child for child in uow.folders.children(parent)}
            folder = existing.get(name.lower())
            if folder is None:
                folder = uow.folders.add(name=name, parent_id=parent)
                created.append(folder)
            parent = folder.id
        uow.commit()
    if args.json:
        emit_json({"tenant": args.tenant, "id": parent, "created": [f.id for f in created]})
    else:
        print(f"{parent}\t{args.path}\t({len(created)} created)")
    return EXIT_OK


def _list(ctx: Context, args: argparse.Namespace) -> int:
    with UnitOfWork(ctx.engine, tenant=args.tenant, system=OPERATOR) as uow:
        within = resolve_folder(uow, args.within)
        children = uow.folders.children(within)
    if args.json:
        emit_json({"tenant": args.tenant, "folder": within, "folders": [_row(f) for f in children]})
        return EXIT_OK
    for child in children:
        print(f"{child.id}\t{child.name}")
    print(f"{len(children)} folder(s)")
    return EXIT_OK


def _tree(ctx: Context, args: argparse.Namespace) -> int:
    with UnitOfWork(ctx.engine, tenant=args.tenant, system=OPERATOR) as uow:
        within = resolve_folder(uow, args.within)
        if within is None:
            found = [f for top in uow.folders.children(None) for f in uow.folders.subtree(top.id)]
        else:
            found = uow.folders.subtree(within)[1:]  # below it, not the folder itself
    if args.json:
        emit_json({"tenant": args.tenant, "folder": within, "folders": [_row(f) for f in found]})
        return EXIT_OK
    below: defaultdict[uuid.UUID | None, list[Folder]] = defaultdict(list)
    for folder in found:
        below[folder.parent_id].append(folder)
    for line in _lines(below, within, depth=0):
        print(line)
    print(f"{len(found)} folder(s)")
    return EXIT_OK


def _lines(
    below: dict[uuid.UUID | None, list[Folder]], parent: uuid.UUID | None, *, depth: int
) -> list[str]:
    lines: list[str] = []
    for folder in below.get(parent, []):
        lines.append(f"{'  ' * depth}{folder.name}\t{folder.id}")
        lines += _lines(below, folder.id, depth=depth + 1)
    return lines


def _row(folder: Folder) -> dict[str, object]:
    return {"id": folder.id, "parent_id": folder.parent_id, "name": folder.name}
