"""Development commands: ``dms users stand-in|create|list``, ``seed``, ``demo``, ``server``."""

from __future__ import annotations

import argparse

from dms import embedded
from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.cli.output import add_json_flag, emit_json, tell
from dms.seed import DEMO_TIMEOUT_SECONDS, run_demo, seed
from dms.users import create_user, create_users_stand_in, list_users, require_users_table


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the development commands to ``commands``."""
    users = commands.add_parser("users", help="the IAM users table")
    users_commands = users.add_subparsers(dest="users_command", required=True)
    users_commands.add_parser(
        "stand-in", help="create a development stand-in users table"
    ).set_defaults(run=_users_stand_in)
    create = users_commands.add_parser(
        "create", help="add a user to the stand-in (or find one by e-mail) and print its id"
    )
    create.add_argument("email", help="the user's e-mail, unique")
    create.add_argument("--name", help="display name (default: the e-mail)")
    add_json_flag(create)
    create.set_defaults(run=_users_create)
    listing = users_commands.add_parser("list", help="the stand-in's users, by e-mail")
    add_json_flag(listing)
    listing.set_defaults(run=_users_list)
    commands.add_parser("seed", help="fill the database with development data").set_defaults(
        run=_seed
    )
    demo = commands.add_parser("demo", help="migrate, seed, process and summarise")
    demo.add_argument(
        "--timeout",
        type=float,
        default=DEMO_TIMEOUT_SECONDS,
        help=f"seconds to wait for the seed jobs (default {DEMO_TIMEOUT_SECONDS})",
    )
    demo.set_defaults(run=_demo)
    server = commands.add_parser("server", help="the embedded development server")
    server_commands = server.add_subparsers(dest="server_command", required=True)
    server_commands.add_parser(
        "status", help="whether it runs, and where (never starts it)"
    ).set_defaults(run=_server_status)
    server_commands.add_parser(
        "stop", help="stop it (the next dms command starts it)"
    ).set_defaults(run=_server_stop)


def _users_stand_in(ctx: Context, args: argparse.Namespace) -> int:
    created = create_users_stand_in(ctx.engine, ctx.settings)
    print("created the users stand-in" if created else "a users table already exists")
    return EXIT_OK


def _users_create(ctx: Context, args: argparse.Namespace) -> int:
    name = args.email if args.name is None else args.name
    with ctx.engine.begin() as conn:
        require_users_table(conn, ctx.settings)
        user_id = create_user(conn, email=args.email, display_name=name, settings=ctx.settings)
    if args.json:
        emit_json({"id": user_id, "email": args.email})
    else:
        print(user_id)
    return EXIT_OK


def _users_list(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.engine.connect() as conn:
        users = list_users(conn, settings=ctx.settings)
    if args.json:
        emit_json({"users": users})
        return EXIT_OK
    for user in users:
        print(f"{user.id}\t{user.email}\t{user.display_name}")
    print(f"{len(users)} user(s)")
    return EXIT_OK


def _seed(ctx: Context, args: argparse.Namespace) -> int:
    print(seed(ctx.engine, settings=ctx.settings).describe())
    return EXIT_OK


def _demo(ctx: Context, args: argparse.Namespace) -> int:
    result = run_demo(ctx.engine, settings=ctx.settings, timeout_seconds=args.timeout)
    print(result.summary)
    if result.unfinished:
        tell(
            f"error: {result.unfinished} seed job(s) still queued or running after "
            f"{args.timeout:g} s; see: dms jobs stats"
        )
        return EXIT_ERROR
    return EXIT_OK


def _server_status(ctx: Context, args: argparse.Namespace) -> int:
    status = embedded.status(ctx.settings.data_dir)
    if status.running:
        print(f"running (pid {status.pid}) in {status.pgdata}: {status.url}")
    elif status.initialised:
        print(f"stopped; data in {status.pgdata}")
    else:
        print(f"not created yet; the first dms command creates it in {status.pgdata}")
    return EXIT_OK


def _server_stop(ctx: Context, args: argparse.Namespace) -> int:
    stopped = embedded.stop(ctx.settings.data_dir)
    print(f"stopped the server in {ctx.settings.data_dir}" if stopped else "it was not running")
    return EXIT_OK
