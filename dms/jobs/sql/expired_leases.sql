-- dms.jobs: expired_leases, rendered from its Core expression (dms/jobs/rendered.py)
SELECT count(*) AS count_1
FROM dms.processing_jobs
WHERE dms.processing_jobs.state = %(state_1)s::VARCHAR
    AND dms.processing_jobs.lease_expires_at < now() - %(older_than)s;
