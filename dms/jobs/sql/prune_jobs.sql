-- dms.jobs: prune_jobs, rendered from its Core expression (dms/jobs/rendered.py)
DELETE
FROM dms.processing_jobs
WHERE dms.processing_jobs.state IN (__[POSTCOMPILE_state_1])
    AND dms.processing_jobs.finished_at < now() - %(older_than)s;
