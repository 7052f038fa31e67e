-- dms.jobs: prune_keys, rendered from its Core expression (dms/jobs/rendered.py)
DELETE
FROM dms.job_idempotency_keys
WHERE dms.job_idempotency_keys.expires_at < now();
