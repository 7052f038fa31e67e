-- dms.jobs: register_schedule, rendered from its Core expression (dms/jobs/rendered.py)
INSERT INTO dms.job_schedules (name,
                     cron, timezone, kind, payload, tenant, priority, max_attempts, catch_up, next_run_at,
                     last_tick_at, skipped_until, updated_at)
VALUES (%(name)s::VARCHAR, %(cron)s::VARCHAR, %(timezone)s::VARCHAR, %(kind)s::VARCHAR, %(payload)s::JSONB, %(tenant)s::VARCHAR, %(priority)s::INTEGER, %(max_attempts)s::INTEGER, %(catch_up)s, %(next_run_at)s::TIMESTAMP WITH TIME ZONE, %(last_tick_at)s::TIMESTAMP WITH TIME ZONE, %(skipped_until)s::TIMESTAMP WITH TIME ZONE, %(updated_at)s::TIMESTAMP WITH TIME ZONE) ON CONFLICT (name) DO
UPDATE
SET cron = excluded.cron, timezone = excluded.timezone, kind = excluded.kind, payload = excluded.payload,
    tenant = excluded.tenant, priority = excluded.priority, max_attempts = excluded.max_attempts,
    catch_up = excluded.catch_up, next_run_at = CASE
                                                    WHEN (dms.job_schedules.cron IS DISTINCT
                                                          FROM excluded.cron
                                                          OR dms.job_schedules.timezone IS DISTINCT
                                                          FROM excluded.timezone) THEN excluded.next_run_at ELSE dms.job_schedules.next_run_at
                                                END, updated_at = now();
