-- dms.jobs: remove_schedule, rendered from its Core expression (dms/jobs/rendered.py)
DELETE
FROM dms.job_schedules
WHERE dms.job_schedules.name = %(schedule_name)s::VARCHAR RETURNING dms.job_schedules.name;
