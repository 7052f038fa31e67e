"""Fairness between tenants: one tenant's backlog against ten tenants' trickle of jobs.

``python -m bench.fairness`` (:mod:`bench.fairness.run`); each system's side in a module of its
own (:mod:`bench.fairness.dms_side`, :mod:`bench.fairness.pgqueuer_side`), what they share in
:mod:`bench.fairness.common`.
"""
