-- dms.jobs: list_schedules, rendered from its Core expression (dms/jobs/rendered.py)
SELECT dms.job_schedules.name, dms.job_schedules.cron, dms.job_schedules.timezone, dms.job_schedules.kind,
       dms.job_schedules.payload, dms.job_schedules.tenant, dms.job_schedules.priority, dms.job_schedules.max_attempts,
       dms.job_schedules.catch_up, dms.job_schedules.next_run_at, dms.job_schedules.last_tick_at,
       dms.job_schedules.skipped_until, dms.job_schedules.updated_at
FROM dms.job_schedules
ORDER BY dms.job_schedules.name;
