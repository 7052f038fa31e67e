-- dms.jobs: lock_limits, rendered from its Core expression (dms/jobs/rendered.py)
WITH limited AS MATERIALIZED
    (SELECT DISTINCT dms.job_limits.tenant AS tenant
     FROM dms.job_limits
     WHERE
             (SELECT runnable.id
              FROM dms.processing_jobs AS runnable
              WHERE runnable.tenant = dms.job_limits.tenant
                  AND runnable.state = %(state_1)s::VARCHAR
                  AND runnable.run_at <= now()
              ORDER BY runnable.tenant, runnable.priority, runnable.run_at, runnable.id
              LIMIT %(param_1)s::INTEGER) IS NOT NULL)
SELECT set_config(%(set_config_2)s::VARCHAR,
           coalesce(CAST(array_agg(locked.tenant) AS TEXT), %(coalesce_1)s::VARCHAR), true) AS set_config_1
FROM
    (SELECT limited.tenant AS tenant
     FROM limited
     WHERE pg_try_advisory_xact_lock(hashtext(%(hashtext_1)s::VARCHAR), hashtext(limited.tenant))) AS locked;
