-- dms.jobs: announce_worker, rendered from its Core expression (dms/jobs/rendered.py)
INSERT INTO dms.job_workers (name, kinds)
VALUES (%(worker_name)s::VARCHAR, %(kinds)s::TEXT[]) ON CONFLICT (name) DO
UPDATE
SET kinds = excluded.kinds, seen_at = now();
