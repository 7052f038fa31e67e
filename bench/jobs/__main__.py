"""``python -m bench.jobs``: see :mod:`bench.jobs.run`."""

from bench.jobs.run import main

main()
