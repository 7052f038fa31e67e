-- dms.jobs: set_limit, rendered from its Core expression (dms/jobs/rendered.py)
INSERT INTO dms.job_limits (tenant, kind, max_running, per_second, tokens)
VALUES (%(tenant)s::VARCHAR, %(kind)s::VARCHAR, %(max_running)s::INTEGER, %(per_second)s, greatest(%(greatest_1)s, coalesce(%(per_second)s, %(coalesce_1)s))) ON CONFLICT (tenant, kind) DO
UPDATE
SET max_running = excluded.max_running, per_second = excluded.per_second, tokens = excluded.tokens, tokens_at = now(),
    updated_at = now();
