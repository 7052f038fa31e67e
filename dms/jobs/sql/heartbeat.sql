-- dms.jobs: heartbeat, rendered from its Core expression (dms/jobs/rendered.py)
UPDATE dms.processing_jobs
SET lease_expires_at=(now() + %(lease)s)
WHERE dms.processing_jobs.id = %(job_id)s::UUID
    AND dms.processing_jobs.locked_by = %(fence_worker)s::VARCHAR
    AND dms.processing_jobs.attempts = %(fence_attempt)s::INTEGER
    AND dms.processing_jobs.state = %(state_1)s::VARCHAR RETURNING dms.processing_jobs.id, dms.processing_jobs.tenant,
                                                                   dms.processing_jobs.kind, dms.processing_jobs.payload,
                                                                   dms.processing_jobs.priority, dms.processing_jobs.state,
                                                                   dms.processing_jobs.attempts,
                                                                   dms.processing_jobs.max_attempts, dms.processing_jobs.run_at,
                                                                   dms.processing_jobs.locked_by,
                                                                   dms.processing_jobs.lease_expires_at,
                                                                   dms.processing_jobs.last_error, dms.processing_jobs.errors,
                                                                   dms.processing_jobs.backoff,
                                                                   dms.processing_jobs.idempotency_key,
                                                                   dms.processing_jobs.created_at,
                                                                   dms.processing_jobs.started_at,
                                                                   dms.processing_jobs.finished_at;
