-- dms.jobs: complete_many, rendered from its Core expression (dms/jobs/rendered.py)
UPDATE dms.processing_jobs
SET state=%(state)s::VARCHAR, lease_expires_at=%(lease_expires_at)s::TIMESTAMP WITH TIME ZONE,
                                                                                         finished_at=now()
FROM json_to_recordset(CAST(%(acked)s::VARCHAR AS JSON)) AS acked(position INTEGER, id UUID,
                                                                locked_by TEXT, attempts INTEGER)
WHERE dms.processing_jobs.id = ANY (array(
                                              (SELECT acked.id
                                               FROM json_to_recordset(CAST(%(acked)s::VARCHAR AS JSON)) AS acked(position INTEGER, id UUID,

                                                                                                               locked_by TEXT, attempts INTEGER))))
    AND dms.processing_jobs.id = acked.id
    AND dms.processing_jobs.locked_by = acked.locked_by
    AND dms.processing_jobs.attempts = acked.attempts
    AND dms.processing_jobs.lease_expires_at IS NOT NULL RETURNING acked.position;
