-- dms.jobs: advance_schedule, rendered from its Core expression (dms/jobs/rendered.py)
UPDATE dms.job_schedules
SET next_run_at=%(next_run_at)s::TIMESTAMP WITH TIME ZONE,
                                                     last_tick_at=coalesce(%(last_tick_at)s::TIMESTAMP WITH TIME ZONE,

                                                                      dms.job_schedules.last_tick_at),
                                                     skipped_until=coalesce(%(skipped_until)s::TIMESTAMP WITH TIME ZONE,

                                                                       dms.job_schedules.skipped_until)
WHERE dms.job_schedules.name = %(schedule_name)s::VARCHAR;
