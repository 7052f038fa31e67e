-- dms.jobs: database_now, rendered from its Core expression (dms/jobs/rendered.py)
SELECT now() AS now_1;
