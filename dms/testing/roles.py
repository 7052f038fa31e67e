"""An engine that acts as the application's role, for tests and benchmarks.

Row-level security never applies to a superuser or a role with ``BYPASSRLS`` (docs/access.md),
and test servers are usually reached as a superuser. :func:`application_engine` makes the
application role the way a deployment does (:func:`dms.roles.setup`: once per server and
database, as parallel processes race to create it) and returns an engine that logs in as that
role (trust authentication, as on test servers): what a test does through it, the deployed
application can do, and nothing more.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from dms import roles

#: The role :func:`application_engine` acts as.
APPLICATION_ROLE = "dms_test_app"
#: Tries at setting the role up: parallel test processes race to create and grant it.
_ATTEMPTS = 10


def application_engine(engine: Engine, tenants: Iterable[str] = (), **options: Any) -> Engine:
    """An engine on ``engine``'s database whose sessions act as :data:`APPLICATION_ROLE`.

    ``engine`` must be able to create roles and grant on dms's schemas (the owner's). The role
    gets what :func:`dms.roles.setup` grants, on every registered tenant (``tenants`` is
    accepted for callers that name theirs). ``options`` go to :func:`sqlalchemy.create_engine`;
    without a ``poolclass`` there is no pool (a test's connections end with it), and a
    benchmark passes a pool so that its timings, like the superuser's, are of warm sessions.
    Dispose of the returned engine when done.
    """
    del tenants  # every registered tenant is granted
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            roles.setup(engine, APPLICATION_ROLE)
            break
        except DBAPIError:
            if attempt == _ATTEMPTS:
                raise
            time.sleep(0.1 * attempt)
    url = engine.url.set(username=APPLICATION_ROLE)
    return sa.create_engine(url, **{"poolclass": sa.NullPool, **options})
