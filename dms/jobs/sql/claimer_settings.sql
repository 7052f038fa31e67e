-- dms.jobs: claimer_settings, rendered from its Core expression (dms/jobs/rendered.py)
SELECT set_config(%(set_config_2)s::VARCHAR, %(set_config_3)s::VARCHAR, true) AS set_config_1, set_config(%(set_config_5)s::VARCHAR,

                                                                                                   %(set_config_6)s::VARCHAR,
                                                                                                   true) AS set_config_4,
       set_config(%(set_config_8)s::VARCHAR, %(set_config_9)s::VARCHAR, true) AS set_config_7,
       set_config(%(set_config_11)s::VARCHAR, %(set_config_12)s::VARCHAR, true) AS set_config_10;
