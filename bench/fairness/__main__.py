"""``python -m bench.fairness``: see :mod:`bench.fairness.run`."""

from bench.fairness.run import main

main()
