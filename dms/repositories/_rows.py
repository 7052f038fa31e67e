"""Result rows to domain objects: the one mapping every repository module uses."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from sqlalchemy.engine import Row

_T = TypeVar("_T")


def build(cls: type[_T], row: Row[Any]) -> _T:
    """Return the ``cls`` (a dataclass of :mod:`dms.domain`) whose fields are in ``row``.

    Queries may select more than the entity (sort keys, depths): only its fields are taken.
    """
    mapping = row._mapping
    return cls(**{f.name: mapping[f.name] for f in dataclasses.fields(cls)})  # type: ignore[arg-type]
