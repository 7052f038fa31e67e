"""Fairness between tenants: one tenant's backlog against ten tenants' trickle of jobs.

dms.jobs (:mod:`bench.fairness.dms_side`) against pgqueuer and procrastinate
(:mod:`bench.fairness.pgqueuer_side`, :mod:`bench.fairness.procrastinate_side`), side by side
in one run: ``python -m bench.fairness`` (:mod:`bench.fairness.run`); what they share in
:mod:`bench.fairness.common`.
"""
