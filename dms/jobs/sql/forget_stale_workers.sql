-- dms.jobs: forget_stale_workers, rendered from its Core expression (dms/jobs/rendered.py)
DELETE
FROM dms.job_workers
WHERE dms.job_workers.seen_at < now() - %(stale_after)s;
