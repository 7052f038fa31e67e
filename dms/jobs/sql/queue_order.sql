-- dms.jobs: queue_order, rendered from its Core expression (dms/jobs/rendered.py)
WITH previous AS MATERIALIZED
    (SELECT current_setting(%(current_setting_1)s::VARCHAR) AS enable_sort, current_setting(%(current_setting_2)s::VARCHAR) AS enable_bitmapscan,
            current_setting(%(current_setting_3)s::VARCHAR) AS jit)
SELECT previous.enable_sort, previous.enable_bitmapscan, previous.jit,
       set_config(%(set_config_2)s::VARCHAR, %(set_config_3)s::VARCHAR, true) AS set_config_1, set_config(%(set_config_5)s::VARCHAR,

                                                                                                   %(set_config_6)s::VARCHAR,
                                                                                                   true) AS set_config_4,
       set_config(%(set_config_8)s::VARCHAR, %(set_config_9)s::VARCHAR, true) AS set_config_7
FROM previous;
