-- dms.jobs: state_counts, rendered from its Core expression (dms/jobs/rendered.py)
SELECT dms.processing_jobs.tenant, dms.processing_jobs.kind, dms.processing_jobs.state, count(*) AS count_1
FROM dms.processing_jobs
WHERE true
GROUP BY dms.processing_jobs.tenant, dms.processing_jobs.kind, dms.processing_jobs.state
ORDER BY dms.processing_jobs.tenant, dms.processing_jobs.kind, dms.processing_jobs.state;
