-- dms.jobs: claim, rendered from its Core expression (dms/jobs/rendered.py)
WITH RECURSIVE walk(tenant, step, wrapped) AS
    (SELECT coalesce(start.tenant,
                         (SELECT processing_jobs_1.tenant
                          FROM dms.processing_jobs AS processing_jobs_1
                          WHERE processing_jobs_1.state = %(state_1)s::VARCHAR
                              AND processing_jobs_1.run_at <= now()
                              AND processing_jobs_1.tenant > %(param_1)s::VARCHAR
                          ORDER BY processing_jobs_1.tenant,
                          processing_jobs_1.priority, processing_jobs_1.run_at, processing_jobs_1.id
                          LIMIT %(param_2)s::INTEGER)) AS tenant, %(param_3)s::INTEGER AS step, start.tenant IS NULL AS wrapped
     FROM
         (SELECT
              (SELECT processing_jobs_2.tenant
               FROM dms.processing_jobs AS processing_jobs_2
               WHERE processing_jobs_2.state = %(state_2)s::VARCHAR
                   AND processing_jobs_2.run_at <= now()
                   AND processing_jobs_2.tenant > %(after_tenant)s::VARCHAR
               ORDER BY processing_jobs_2.tenant, processing_jobs_2.priority, processing_jobs_2.run_at, processing_jobs_2.id
               LIMIT %(param_4)s::INTEGER) AS tenant) AS start
     UNION ALL SELECT CASE WHEN (following.tenant IS NOT NULL) THEN following.tenant
                          WHEN NOT walk.wrapped THEN
                                   (SELECT processing_jobs_3.tenant
                                    FROM dms.processing_jobs AS processing_jobs_3
                                    WHERE processing_jobs_3.state = %(state_3)s::VARCHAR
                                        AND processing_jobs_3.run_at <= now()
                                        AND processing_jobs_3.tenant > %(param_1)s::VARCHAR
                                    ORDER BY processing_jobs_3.tenant, processing_jobs_3.priority, processing_jobs_3.run_at,
                                             processing_jobs_3.id
                                    LIMIT %(param_5)s::INTEGER)
                      END AS anon_1, walk.step + %(step_1)s::INTEGER AS anon_2, walk.wrapped
     OR following.tenant IS NULL AS anon_3
     FROM walk
     JOIN LATERAL
         (SELECT
              (SELECT processing_jobs_4.tenant
               FROM dms.processing_jobs AS processing_jobs_4
               WHERE processing_jobs_4.state = %(state_4)s::VARCHAR
                   AND processing_jobs_4.run_at <= now()
                   AND processing_jobs_4.tenant > walk.tenant
               ORDER BY processing_jobs_4.tenant, processing_jobs_4.priority, processing_jobs_4.run_at, processing_jobs_4.id
               LIMIT %(param_6)s::INTEGER) AS tenant) AS following ON true
     WHERE walk.tenant IS NOT NULL
         AND walk.step < %(tenants)s::INTEGER
         AND NOT (walk.wrapped
                  AND walk.tenant >= %(after_tenant)s::VARCHAR)),
               visited AS
    (SELECT walk.tenant AS tenant
     FROM walk
     WHERE walk.tenant IS NOT NULL
         AND (NOT walk.wrapped
              OR walk.tenant <= %(after_tenant)s::VARCHAR)),
               claimed AS
    (UPDATE dms.processing_jobs
     SET state=%(param_7)s::VARCHAR, attempts=(dms.processing_jobs.attempts + %(attempts_1)s::INTEGER),
         locked_by=%(worker_id)s::VARCHAR, lease_expires_at=(now() + %(lease)s), started_at=now()
     WHERE dms.processing_jobs.id = ANY (array(
                                                   (SELECT own.id
                                                    FROM visited
                                                    JOIN LATERAL
                                                        (SELECT dms.processing_jobs.id AS id,
                                                       dms.processing_jobs.kind AS kind,
                                                       dms.processing_jobs.priority AS priority, dms.processing_jobs.run_at AS run_at
                                                         FROM dms.processing_jobs
                                                         WHERE dms.processing_jobs.tenant = visited.tenant
                                                             AND dms.processing_jobs.state = %(state_5)s::VARCHAR
                                                             AND dms.processing_jobs.run_at <= now()
                                                         ORDER BY dms.processing_jobs.priority,
                                                         dms.processing_jobs.run_at, dms.processing_jobs.id
                                                         LIMIT CASE WHEN (EXISTS
                                                                              (SELECT *
                                                                               FROM dms.job_limits
                                                                               WHERE dms.job_limits.tenant = visited.tenant)) THEN %(param_8)s::INTEGER ELSE
                                                             (SELECT CAST(ceil(CAST(%(limit)s::INTEGER AS NUMERIC) / CAST(count(*) AS NUMERIC)) AS INTEGER) AS ceil_1
                                                              FROM visited)
                                                         END FOR UPDATE SKIP LOCKED) AS own ON true
                                                    LIMIT %(limit)s::INTEGER))) RETURNING dms.processing_jobs.id,
                                                                                          dms.processing_jobs.tenant,
                                                                                          dms.processing_jobs.kind,
                                                                                          dms.processing_jobs.payload,
                                                                                          dms.processing_jobs.priority,
                                                                                          dms.processing_jobs.attempts,
                                                                                          dms.processing_jobs.max_attempts,
                                                                                          dms.processing_jobs.run_at,
                                                                                          dms.processing_jobs.last_error,
                                                                                          dms.processing_jobs.errors,
                                                                                          dms.processing_jobs.backoff,
                                                                                          dms.processing_jobs.idempotency_key,
                                                                                          dms.processing_jobs.created_at)
SELECT CAST(json_build_array(date_part('epoch', now()),
                date_part('epoch', now() + %(lease)s),
                json_agg(json_build_array(claimed.id,
                             claimed.tenant, claimed.kind, claimed.payload, claimed.priority,
                             claimed.attempts, claimed.max_attempts, date_part('epoch',
                                                                         claimed.run_at),
                             claimed.last_error, claimed.errors, claimed.backoff, claimed.idempotency_key,
                             date_part('epoch',
                                 claimed.created_at))), EXISTS
                                 (SELECT *
                                  FROM dms.job_limits
                                  WHERE dms.job_limits.tenant = ANY (array(
                                                                               (SELECT visited.tenant
                                                                                FROM visited)))), EXISTS
                                 (SELECT dms.job_limits.tenant
                                  FROM dms.job_limits)) AS TEXT) AS document
FROM claimed;
