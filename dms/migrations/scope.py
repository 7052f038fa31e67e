"""Which schema a revision's ``upgrade``/``downgrade`` acts on: the shared one or a tenant's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dms.config import SHARED_SCHEMA, Settings


@dataclass(frozen=True, kw_only=True)
class MigrationScope:
    """Which schema a revision's ``upgrade``/``downgrade`` acts on, and how.

    Every revision has a shared part and a tenant part; ``upgrade(scope=...)`` looks at
    :attr:`kind`. Alembic's ``op.*`` ignores ``schema_translate_map``, so revisions name
    :attr:`schema` (and :attr:`users_schema`) explicitly in every operation.
    """

    kind: Literal["shared", "tenant"]
    schema: str
    users_schema: str

    @classmethod
    def shared(cls, settings: Settings) -> MigrationScope:
        """The scope of the shared ``dms`` schema."""
        return cls(kind="shared", schema=SHARED_SCHEMA, users_schema=settings.users_schema)

    @classmethod
    def tenant(cls, schema: str, settings: Settings) -> MigrationScope:
        """The scope of one tenant schema."""
        return cls(kind="tenant", schema=schema, users_schema=settings.users_schema)

    @property
    def is_tenant(self) -> bool:
        """Whether this scope is a tenant schema."""
        return self.kind == "tenant"
