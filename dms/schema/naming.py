"""The constraint naming convention shared by every ``MetaData`` of ``dms``.

Named constraints let migrations drop exactly what they created, and let errors name the
constraint a row violated.
"""

from __future__ import annotations

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
