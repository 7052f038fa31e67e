-- dms.jobs: claim_of_kinds_limited, rendered from its Core expression (dms/jobs/rendered.py)
WITH RECURSIVE walk(tenant, step, wrapped) AS
    (SELECT coalesce(start.tenant,
                         (SELECT processing_jobs_1.tenant
                          FROM dms.processing_jobs AS processing_jobs_1
                          WHERE processing_jobs_1.state = %(state_1)s::VARCHAR
                              AND processing_jobs_1.run_at <= now()
                              AND processing_jobs_1.kind = ANY (%(kinds)s::TEXT[])
                              AND processing_jobs_1.tenant > %(param_2)s::VARCHAR
                          ORDER BY processing_jobs_1.tenant,
                          processing_jobs_1.priority, processing_jobs_1.run_at, processing_jobs_1.id
                          LIMIT %(param_3)s::INTEGER)) AS tenant, %(param_4)s::INTEGER AS step, start.tenant IS NULL AS wrapped
     FROM
         (SELECT
              (SELECT processing_jobs_2.tenant
               FROM dms.processing_jobs AS processing_jobs_2
               WHERE processing_jobs_2.state = %(state_2)s::VARCHAR
                   AND processing_jobs_2.run_at <= now()
                   AND processing_jobs_2.kind = ANY (%(kinds)s::TEXT[])
                   AND processing_jobs_2.tenant > %(after_tenant)s::VARCHAR
               ORDER BY processing_jobs_2.tenant, processing_jobs_2.priority, processing_jobs_2.run_at, processing_jobs_2.id
               LIMIT %(param_5)s::INTEGER) AS tenant) AS start
     UNION ALL SELECT CASE WHEN (following.tenant IS NOT NULL) THEN following.tenant
                          WHEN NOT walk.wrapped THEN
                                   (SELECT processing_jobs_3.tenant
                                    FROM dms.processing_jobs AS processing_jobs_3
                                    WHERE processing_jobs_3.state = %(state_3)s::VARCHAR
                                        AND processing_jobs_3.run_at <= now()
                                        AND processing_jobs_3.kind = ANY (%(kinds)s::TEXT[])
                                        AND processing_jobs_3.tenant > %(param_2)s::VARCHAR
                                    ORDER BY processing_jobs_3.tenant, processing_jobs_3.priority, processing_jobs_3.run_at,
                                             processing_jobs_3.id
                                    LIMIT %(param_6)s::INTEGER)
                      END AS anon_1, walk.step + %(step_1)s::INTEGER AS anon_2, walk.wrapped
     OR following.tenant IS NULL AS anon_3
     FROM walk
     JOIN LATERAL
         (SELECT
              (SELECT processing_jobs_4.tenant
               FROM dms.processing_jobs AS processing_jobs_4
               WHERE processing_jobs_4.state = %(state_4)s::VARCHAR
                   AND processing_jobs_4.run_at <= now()
                   AND processing_jobs_4.kind = ANY (%(kinds)s::TEXT[])
                   AND processing_jobs_4.tenant > walk.tenant
               ORDER BY processing_jobs_4.tenant, processing_jobs_4.priority, processing_jobs_4.run_at, processing_jobs_4.id
               LIMIT %(param_7)s::INTEGER) AS tenant) AS following ON true
     WHERE walk.tenant IS NOT NULL
         AND walk.step < %(tenants)s::INTEGER
         AND NOT (walk.wrapped
                  AND walk.tenant >= %(after_tenant)s::VARCHAR)),
               visited AS
    (SELECT walk.tenant AS tenant
     FROM walk
     WHERE walk.tenant IS NOT NULL
         AND (NOT walk.wrapped
              OR walk.tenant <= %(after_tenant)s::VARCHAR)), allowances AS MATERIALIZED
    (SELECT dms.job_limits.tenant AS tenant, dms.job_limits.kind AS kind,
            CAST(least(CASE
                           WHEN (dms.job_limits.max_running IS NOT NULL) THEN dms.job_limits.max_running -
                                    (SELECT count(*) AS count_2
                                     FROM dms.processing_jobs AS running
                                     WHERE running.state = %(state_6)s::VARCHAR
                                         AND running.tenant = dms.job_limits.tenant
                                         AND (dms.job_limits.kind = %(kind_1)s::VARCHAR
                                              OR running.kind = dms.job_limits.kind))
                       END,

                     CASE
                         WHEN (dms.job_limits.per_second IS NOT NULL) THEN floor(least(greatest(%(greatest_3)s,

                                                                                           dms.job_limits.per_second),

                                                                                     dms.job_limits.tokens + dms.job_limits.per_second * greatest(%(greatest_4)s,

                                                                                                                                             date_part(%(date_part_2)s::VARCHAR,

                                                                                                                                                 statement_timestamp() - dms.job_limits.tokens_at))))
                     END) AS INTEGER) AS allowed
     FROM dms.job_limits
     WHERE dms.job_limits.tenant = ANY (CAST(coalesce(nullif(current_setting(%(current_setting_1)s::VARCHAR,
                                                                 true),
                                                          %(nullif_1)s::VARCHAR),
                                                 %(coalesce_1)s::VARCHAR) AS TEXT[]))), claimed AS
    (UPDATE dms.processing_jobs
     SET state=%(param_1)s::VARCHAR, attempts=(dms.processing_jobs.attempts + %(attempts_1)s::INTEGER),
         locked_by=%(worker_id)s::VARCHAR, lease_expires_at=(now() + %(lease)s), started_at=now()
     WHERE dms.processing_jobs.id = ANY (array(
                                                   (SELECT taken.id
                                                    FROM
                                                        (SELECT own.id AS id,
                                                       visited.tenant AS tenant, own.kind AS kind,
                                                       row_number() OVER (PARTITION BY visited.tenant,
                                                                   own.kind
                                                                          ORDER BY own.priority,
                                                                   own.run_at, own.id) AS nth
                                                         FROM visited
                                                         JOIN LATERAL
                                                             (SELECT dms.processing_jobs.id AS id,
                                                       dms.processing_jobs.kind AS kind,
                                                       dms.processing_jobs.priority AS priority, dms.processing_jobs.run_at AS run_at
                                                              FROM dms.processing_jobs
                                                              WHERE dms.processing_jobs.tenant = visited.tenant
                                                                  AND dms.processing_jobs.state = %(state_5)s::VARCHAR
                                                                  AND dms.processing_jobs.run_at <= now()
                                                                  AND dms.processing_jobs.kind = ANY (%(kinds)s::TEXT[])
                                                                  AND CASE
                                                                          WHEN (cardinality(array(
                                                                                                      (SELECT allowances.kind
                                                                                                       FROM allowances
                                                                                                       WHERE allowances.tenant = visited.tenant
                                                                                                           AND allowances.kind != %(kind_2)s::VARCHAR
                                                                                                           AND allowances.allowed <= %(allowed_1)s::INTEGER))) = %(cardinality_1)s::INTEGER) THEN true
                                                                          ELSE dms.processing_jobs.kind != ALL (array(
                                                                                                                          (SELECT allowances.kind
                                                                                                                           FROM allowances
                                                                                                                           WHERE allowances.tenant = visited.tenant
                                                                                                                               AND allowances.kind != %(kind_2)s::VARCHAR
                                                                                                                               AND allowances.allowed <= %(allowed_1)s::INTEGER)))
                                                                      END
                                                              ORDER BY dms.processing_jobs.priority,
                                                            dms.processing_jobs.run_at, dms.processing_jobs.id
                                                              LIMIT CASE WHEN (NOT (EXISTS
                                                                                        (SELECT *
                                                                                         FROM dms.job_limits
                                                                                         WHERE dms.job_limits.tenant = visited.tenant))) THEN
                                                                  (SELECT CAST(ceil(CAST(%(limit)s::INTEGER AS NUMERIC) / CAST(count(*) AS NUMERIC)) AS INTEGER) AS ceil_1
                                                                   FROM visited) WHEN NOT (visited.tenant = ANY (CAST(coalesce(nullif(current_setting(%(current_setting_1)s::VARCHAR,

                                                                                                                                          true),

                                                                                                                                   %(nullif_1)s::VARCHAR),

                                                                                                                          %(coalesce_1)s::VARCHAR) AS TEXT[]))) THEN %(param_8)s::INTEGER ELSE greatest(%(greatest_5)s::INTEGER,

                                                                                                                                                                                                   least(
                                                                                                                                                                                                             (SELECT CAST(ceil(CAST(%(limit)s::INTEGER AS NUMERIC) / CAST(count(*) AS NUMERIC)) AS INTEGER) AS ceil_1
                                                                                                                                                                                                              FROM visited), coalesce(
                                                                                                                                                                                                                                          (SELECT allowances.allowed
                                                                                                                                                                                                                                           FROM allowances
                                                                                                                                                                                                                                           WHERE allowances.tenant = visited.tenant
                                                                                                                                                                                                                                               AND allowances.kind = %(kind_3)s::VARCHAR),
                                                                                                                                                                                                                                          (SELECT CAST(ceil(CAST(%(limit)s::INTEGER AS NUMERIC) / CAST(count(*) AS NUMERIC)) AS INTEGER) AS ceil_1
                                                                                                                                                                                                                                           FROM visited))))
                                                              END FOR UPDATE SKIP LOCKED) AS own ON true) AS taken
                                                    LEFT OUTER JOIN allowances ON allowances.tenant = taken.tenant
                                                    AND allowances.kind = taken.kind
                                                    WHERE allowances.allowed IS NULL
                                                        OR taken.nth <= allowances.allowed
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
                                                                                          dms.processing_jobs.created_at),
                                                                                        spent AS
    (UPDATE dms.job_limits
     SET tokens=(least(greatest(%(greatest_1)s, dms.job_limits.per_second),

                     dms.job_limits.tokens + dms.job_limits.per_second * greatest(%(greatest_2)s,

                                                                             date_part(%(date_part_1)s::VARCHAR,

                                                                                 statement_timestamp() - dms.job_limits.tokens_at))) -
                     (SELECT count(*) AS count_1
                      FROM claimed
                      WHERE claimed.tenant = dms.job_limits.tenant
                          AND (dms.job_limits.kind = %(kind_4)s::VARCHAR
                               OR claimed.kind = dms.job_limits.kind))), tokens_at=statement_timestamp()
     WHERE dms.job_limits.per_second IS NOT NULL
         AND dms.job_limits.tenant = ANY (array(
                                                    (SELECT claimed.tenant
                                                     FROM claimed))))
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
