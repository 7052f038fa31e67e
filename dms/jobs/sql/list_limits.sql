-- dms.jobs: list_limits, rendered from its Core expression (dms/jobs/rendered.py)
SELECT dms.job_limits.tenant, dms.job_limits.kind, dms.job_limits.max_running, dms.job_limits.per_second,
       dms.job_limits.tokens, dms.job_limits.tokens_at, dms.job_limits.updated_at,

    (SELECT count(*) AS count_1
     FROM dms.processing_jobs AS running
     WHERE running.state = %(state_1)s::VARCHAR
         AND running.tenant = dms.job_limits.tenant
         AND (dms.job_limits.kind = %(kind_1)s::VARCHAR
              OR running.kind = dms.job_limits.kind)) AS running
FROM dms.job_limits
ORDER BY dms.job_limits.tenant, dms.job_limits.kind;
