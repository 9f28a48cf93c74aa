-- name: export_table_by_run
-- All rows of one table that has trace_id and rank, with the key of its trace's run (_export_run_keys, registered by
-- k25trace.export: the run's label made file-name safe), for `k25trace export parquet` (partitioned by run and
-- rank).
-- reads: the table named by $table, _export_run_keys
-- params: $table
-- grain: one row per row of $table
select t.*, _export_run_keys.run
from query_table($table) as t
left join _export_run_keys using (trace_id)
