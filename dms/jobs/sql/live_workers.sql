-- dms.jobs: live_workers, rendered from its Core expression (dms/jobs/rendered.py)
SELECT dms.job_workers.name, dms.job_workers.kinds, dms.job_workers.started_at, dms.job_workers.seen_at
FROM dms.job_workers
WHERE dms.job_workers.seen_at >= now() - %(within)s
ORDER BY dms.job_workers.name;
