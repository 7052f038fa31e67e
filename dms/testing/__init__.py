"""Test helpers for applications built on ``dms``.

:func:`temporary_database` needs nothing beyond ``dms`` itself; the row factories of
:mod:`dms.testing.factories` need factory-boy (``pip install 'dms[testing]'``).
"""

from dms.testing.databases import temporary_database

__all__ = ["temporary_database"]
