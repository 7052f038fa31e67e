-- dms.jobs: reclaim, rendered from its Core expression (dms/jobs/rendered.py)
WITH expired AS
    (SELECT dms.processing_jobs.id AS id
     FROM dms.processing_jobs
     WHERE dms.processing_jobs.state = %(state_1)s::VARCHAR
         AND dms.processing_jobs.lease_expires_at < now()
     ORDER BY dms.processing_jobs.lease_expires_at
     LIMIT %(limit)s::INTEGER
     FOR UPDATE SKIP LOCKED)
UPDATE dms.processing_jobs
SET state=CASE
              WHEN (dms.processing_jobs.attempts >= dms.processing_jobs.max_attempts) THEN %(param_1)s::VARCHAR ELSE %(param_2)s::VARCHAR
          END, lease_expires_at=%(lease_expires_at)s::TIMESTAMP WITH TIME ZONE,
                                                                          last_error=concat(%(concat_1)s::VARCHAR,

                                                                                         dms.processing_jobs.locked_by,
                                                                                         %(concat_2)s::VARCHAR,
                                                                                         dms.processing_jobs.attempts),
                                                                          errors=(dms.processing_jobs.errors || jsonb_build_array(jsonb_build_object(%(jsonb_build_object_1)s::VARCHAR,

                                                                                                                                      dms.processing_jobs.attempts,
                                                                                                                                      %(jsonb_build_object_2)s::VARCHAR,
                                                                                                                                      dms.processing_jobs.locked_by,
                                                                                                                                      %(jsonb_build_object_3)s::VARCHAR,
                                                                                                                                      now(),
                                                                                                                                      %(jsonb_build_object_4)s::VARCHAR,
                                                                                                                                      concat(%(concat_3)s::VARCHAR,

                                                                                                                                          dms.processing_jobs.locked_by,
                                                                                                                                          %(concat_4)s::VARCHAR,
                                                                                                                                          dms.processing_jobs.attempts)))), finished_at=CASE
                                                                                                                                                                                            WHEN (dms.processing_jobs.attempts >= dms.processing_jobs.max_attempts) THEN now()
                                                                                                                                                                                        END
FROM expired
WHERE dms.processing_jobs.id = expired.id RETURNING dms.processing_jobs.id, dms.processing_jobs.tenant,
                                                    dms.processing_jobs.kind, dms.processing_jobs.payload,
                                                    dms.processing_jobs.priority, dms.processing_jobs.state,
                                                    dms.processing_jobs.attempts, dms.processing_jobs.max_attempts,
                                                    dms.processing_jobs.run_at, dms.processing_jobs.locked_by,
                                                    dms.processing_jobs.lease_expires_at, dms.processing_jobs.last_error,
                                                    dms.processing_jobs.errors, dms.processing_jobs.backoff,
                                                    dms.processing_jobs.idempotency_key, dms.processing_jobs.created_at,
                                                    dms.processing_jobs.started_at, dms.processing_jobs.finished_at;
