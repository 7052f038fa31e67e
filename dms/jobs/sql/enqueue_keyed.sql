-- dms.jobs: enqueue_keyed, rendered from its Core expression (dms/jobs/rendered.py)
WITH batch AS
    (SELECT batch.id AS id, batch.tenant AS tenant, batch.kind AS kind, batch.payload AS payload,
            batch.priority AS priority, batch.max_attempts AS max_attempts, batch.run_at AS run_at, batch.backoff AS backoff,
            batch.idempotency_key AS idempotency_key
     FROM jsonb_to_recordset(CAST(%(batch)s::VARCHAR AS JSONB)) AS batch(id UUID,
                                                                       tenant TEXT, kind TEXT, payload JSONB,
                                                                       priority INTEGER, max_attempts INTEGER, run_at TIMESTAMP WITH TIME ZONE,
                                                                       backoff JSONB,
                                                                       idempotency_key TEXT)
     WHERE
             (SELECT count(*) AS count_1
              FROM
                  (SELECT pg_notify('dms_jobs', '') AS pg_notify_1
                   FROM dms.tenants
                   WHERE dms.tenants.slug = ANY (array(
                                                           (SELECT jsonb_array_elements_text(CAST(%(slugs)s::VARCHAR AS JSONB)) AS jsonb_array_elements_text_1)))) AS notified) = jsonb_array_length(CAST(%(slugs)s::VARCHAR AS JSONB))),
     claimed_keys AS
    (INSERT INTO dms.job_idempotency_keys (tenant,
                          kind, idempotency_key, job_id, expires_at) SELECT batch.tenant AS tenant, batch.kind AS kind,
                                                                            batch.idempotency_key AS idempotency_key, batch.id AS id,
                                                                            now() + %(key_retention)s AS anon_1
     FROM batch
     WHERE batch.idempotency_key IS NOT NULL ON CONFLICT DO NOTHING RETURNING dms.job_idempotency_keys.job_id)
INSERT INTO dms.processing_jobs (id,
                     tenant, kind, payload, priority, max_attempts, run_at, backoff, idempotency_key)
SELECT batch.id, batch.tenant, batch.kind, batch.payload, batch.priority, batch.max_attempts,
       coalesce(batch.run_at, now()) AS coalesce_1, batch.backoff, batch.idempotency_key
FROM batch
WHERE batch.idempotency_key IS NULL
    OR batch.id IN
        (SELECT claimed_keys.job_id
         FROM claimed_keys) RETURNING dms.processing_jobs.id;
