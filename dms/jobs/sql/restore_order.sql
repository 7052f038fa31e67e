-- dms.jobs: restore_order, rendered from its Core expression (dms/jobs/rendered.py)
SELECT set_config(%(set_config_2)s::VARCHAR, %(enable_sort)s::VARCHAR, true) AS set_config_1,
       set_config(%(set_config_4)s::VARCHAR, %(enable_bitmapscan)s::VARCHAR, true) AS set_config_3, set_config(%(set_config_6)s::VARCHAR,

                                                                                                        %(jit)s::VARCHAR,
                                                                                                        true) AS set_config_5;
