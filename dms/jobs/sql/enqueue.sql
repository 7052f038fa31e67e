-- dms.jobs: enqueue, rendered from its Core expression (dms/jobs/rendered.py)
WITH inserted AS
    (INSERT INTO dms.processing_jobs (id,
                          tenant, kind, payload, priority, max_attempts, run_at, backoff, idempotency_key) SELECT batch.id AS id,
                                                                                                                  batch.tenant AS tenant,
                                                                                                                  batch.kind AS kind,
                                                                                                                  batch.payload AS payload,
                                                                                                                  batch.priority AS priority,
                                                                                                                  batch.max_attempts AS max_attempts,
                                                                                                                  coalesce(batch.run_at,

                                                                                                                      now()) AS coalesce_1,
                                                                                                                  batch.backoff AS backoff,
                                                                                                                  batch.idempotency_key AS idempotency_key
     FROM jsonb_to_recordset(CAST(%(batch)s::VARCHAR AS JSONB)) AS batch(id UUID,
                                                                       tenant TEXT, kind TEXT, payload JSONB,
                                                                       priority INTEGER, max_attempts INTEGER, run_at TIMESTAMP WITH TIME ZONE,
                                                                       backoff JSONB,
                                                                       idempotency_key TEXT)
     WHERE
             (SELECT count(*) AS count_2
              FROM
                  (SELECT pg_notify('dms_jobs', '') AS pg_notify_1
                   FROM dms.tenants
                   WHERE dms.tenants.slug = ANY (array(
                                                           (SELECT jsonb_array_elements_text(CAST(%(slugs)s::VARCHAR AS JSONB)) AS jsonb_array_elements_text_1)))) AS notified) = jsonb_array_length(CAST(%(slugs)s::VARCHAR AS JSONB)) RETURNING dms.processing_jobs.id)
SELECT count(*) AS count_1
FROM inserted;
