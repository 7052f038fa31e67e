"""The worker sits below the unit of work: no module of ``dms.jobs`` imports anything above.

Issue 10: handlers reach the worker's unit of work through a protocol and a factory
(``dms/jobs/worker/unit.py``), so ``dms.jobs.worker`` no longer imports ``dms.uow``. Kept apart
from ``test_layers.py``, whose helpers it uses, so that the two branches of issue 10 merge
without touching the same lines.
"""

from __future__ import annotations

import pytest

from tests.unit.test_layers import internal_imports, modules

#: What ``dms.jobs`` sits below (DESIGN §8).
ABOVE_THE_QUEUE = ("dms.uow", "dms.repositories", "dms.services", "dms.processing", "dms.cli")


@pytest.mark.parametrize("module", sorted(m for m in modules() if m.startswith("dms.jobs")))
def test_the_queue_and_its_worker_import_nothing_above_them(module: str) -> None:
    above = {m for m in internal_imports(module) if m.startswith(ABOVE_THE_QUEUE)}
    assert above == set()


def test_the_layer_check_sees_a_module_above_the_queue() -> None:
    """Control: the processing handlers are above the queue and import the unit of work."""
    assert {"dms.uow", "dms.jobs"} <= internal_imports("dms.processing")
