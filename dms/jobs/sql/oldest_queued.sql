-- dms.jobs: oldest_queued, rendered from its Core expression (dms/jobs/rendered.py)
SELECT now() - min(dms.processing_jobs.run_at) AS anon_1
FROM dms.processing_jobs
WHERE true
    AND dms.processing_jobs.state = %(state_1)s::VARCHAR
    AND dms.processing_jobs.run_at <= now();
