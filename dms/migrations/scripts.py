"""The migration scripts: where they are, the chain they form, and revision names resolved.

A :class:`Scripts` names a script directory by location, so that worker processes load the
same one (``dms``'s own, or whatever ``alembic.ini`` names). Its revisions form one linear
chain; :meth:`Scripts.resolve` turns what an operator typed (``head``, ``base``, ``0002``,
``-1``, ``head-2``, ``+1``) into one absolute revision, once, before anything runs: a typo is
one line, not one error per tenant, and a fleet run that was interrupted can be finished with
the same absolute target, whatever ``-1`` meant when it started.
"""

from __future__ import annotations

import functools
import re
from argparse import Namespace
from dataclasses import dataclass
from pathlib import Path

from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import URL

from dms.errors import MigrationError

#: The table in which every schema keeps its revision.
VERSION_TABLE = "alembic_version"

_RELATIVE = re.compile(r"(?P<anchor>[^+-]+)?(?P<sign>[+-])(?P<steps>[0-9]+)")


def script_location() -> Path:
    """The directory of dms's Alembic environment: inside the installed package, or the repo's."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "_alembic"
    return packaged if packaged.is_dir() else package.parent / "alembic"


def _escape(value: str) -> str:
    return value.replace("%", "%%")  # ConfigParser interpolation


def alembic_config(url: str | URL | None = None, *, cmd_opts: Namespace | None = None) -> Config:
    """An Alembic ``Config`` for ``dms``'s environment, without needing ``alembic.ini``.

    ``cmd_opts``: alembic's parsed command line, for ``dms alembic ...``.
    """
    config = Config(cmd_opts=cmd_opts)
    config.set_main_option("script_location", _escape(str(script_location())))
    if url is not None:
        rendered = url.render_as_string(hide_password=False) if isinstance(url, URL) else url
        config.set_main_option("sqlalchemy.url", _escape(rendered))
    return config


@dataclass(frozen=True, kw_only=True)
class Scripts:
    """A script directory, by location; picklable, so that worker processes load the same."""

    location: str
    version_locations: str | None = None

    @classmethod
    def default(cls) -> Scripts:
        """``dms``'s own migrations."""
        return cls(location=str(script_location()))

    @classmethod
    def of_config(cls, config: Config) -> Scripts:
        """The scripts that an Alembic ``Config`` (an ``alembic.ini``) names."""
        location = config.get_main_option("script_location")
        if not location:
            raise MigrationError("the alembic configuration names no script_location")
        return cls(location=location, version_locations=config.get_main_option("version_locations"))

    def config(self) -> Config:
        """A fresh ``Config`` naming these scripts."""
        config = Config()
        config.set_main_option("script_location", _escape(self.location))
        if self.version_locations:
            config.set_main_option("version_locations", _escape(self.version_locations))
        return config

    def directory(self) -> ScriptDirectory:
        """The loaded script directory (loaded once per process: revisions compile once)."""
        return _directory(self)

    def chain(self) -> tuple[str, ...]:
        """Every revision from the first to head."""
        return _chain(self)

    def head(self) -> str:
        """The head revision."""
        chain = self.chain()
        if not chain:
            raise MigrationError("no migration scripts found")
        return chain[-1]

    def resolve(self, target: str, *, current: str | None) -> str | None:
        """The absolute revision that ``target`` names (``None``: base).

        Relative targets (``-1``, ``+2``) count from ``current``; ``head-1``, ``0003+1`` from
        the revision they name. Raises :class:`MigrationError`, with alembic's wording, for a
        revision that does not exist or a step beyond either end of the chain.
        """
        relative = _RELATIVE.fullmatch(target)
        if relative is None:
            return self._absolute(target)
        anchor_name = relative.group("anchor")
        anchor = current if anchor_name is None else self._absolute(anchor_name)
        chain = self.chain()
        position = chain.index(anchor) + 1 if anchor is not None else 0  # 0 is base
        steps = int(relative.group("steps"))
        moved = position + steps if relative.group("sign") == "+" else position - steps
        if not 0 <= moved <= len(chain):
            raise MigrationError(
                f"{target!r} from {anchor or 'base'} goes beyond the chain "
                f"(base, {', '.join(chain)})"
            )
        return chain[moved - 1] if moved else None

    def _absolute(self, name: str) -> str | None:
        if name == "base":
            return None
        if name in ("head", "heads"):
            return self.head()
        try:
            revision = self.directory().get_revision(name)
        except CommandError as exc:
            raise MigrationError(str(exc)) from exc
        if revision is None:
            raise MigrationError(f"Can't locate revision identified by {name!r}")
        return revision.revision


@functools.cache
def _directory(scripts: Scripts) -> ScriptDirectory:
    return ScriptDirectory.from_config(scripts.config())


@functools.cache
def _chain(scripts: Scripts) -> tuple[str, ...]:
    walked = list(scripts.directory().walk_revisions())
    revisions = tuple(script.revision for script in reversed(walked))
    for previous, script in zip((None, *revisions), reversed(walked), strict=False):
        if script.down_revision != previous:
            raise MigrationError("the revisions must form one linear chain")
    return revisions


def head_revision() -> str:
    """The head revision of ``dms``'s own chain."""
    return Scripts.default().head()
