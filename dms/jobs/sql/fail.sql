-- dms.jobs: fail, rendered from its Core expression (dms/jobs/rendered.py)
UPDATE dms.processing_jobs
SET state=CASE
              WHEN (dms.processing_jobs.attempts >= dms.processing_jobs.max_attempts
                    OR %(give_up)s) THEN %(param_1)s::VARCHAR ELSE %(param_2)s::VARCHAR
          END, run_at=CASE
                          WHEN (dms.processing_jobs.attempts >= dms.processing_jobs.max_attempts
                                OR %(give_up)s) THEN dms.processing_jobs.run_at ELSE now() + %(delay)s
                      END, lease_expires_at=%(lease_expires_at)s::TIMESTAMP WITH TIME ZONE,
                                                                                      last_error=%(error)s::VARCHAR,
                                                                                      errors=(dms.processing_jobs.errors || jsonb_build_array(jsonb_build_object(%(jsonb_build_object_1)s::VARCHAR,

                                                                                                                                                  dms.processing_jobs.attempts,
                                                                                                                                                  %(jsonb_build_object_2)s::VARCHAR,
                                                                                                                                                  dms.processing_jobs.locked_by,
                                                                                                                                                  %(jsonb_build_object_3)s::VARCHAR,
                                                                                                                                                  now(),
                                                                                                                                                  %(jsonb_build_object_4)s::VARCHAR,
                                                                                                                                                  %(summary)s::VARCHAR))),
                                                                                      finished_at=CASE
                                                                                                      WHEN (dms.processing_jobs.attempts >= dms.processing_jobs.max_attempts
                                                                                                            OR %(give_up)s) THEN now()
                                                                                                  END
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
