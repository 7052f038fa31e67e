-- dms.jobs: remove_limit, rendered from its Core expression (dms/jobs/rendered.py)
DELETE
FROM dms.job_limits
WHERE dms.job_limits.tenant = %(tenant)s::VARCHAR
    AND dms.job_limits.kind = %(kind)s::VARCHAR RETURNING dms.job_limits.tenant;
