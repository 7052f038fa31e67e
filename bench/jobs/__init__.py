"""Side-by-side benchmark of dms.jobs, procrastinate, pgqueuer and a pgbench bound; see run.py."""
