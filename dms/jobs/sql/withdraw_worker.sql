-- dms.jobs: withdraw_worker, rendered from its Core expression (dms/jobs/rendered.py)
DELETE
FROM dms.job_workers
WHERE dms.job_workers.name = %(worker_name)s::VARCHAR;
