-- name: export_run_keys
-- Every trace with its run (trace_runs; NULL for a front-end trace, which belongs to no run) and the run's label
-- parts, for naming the run=… partitions of `k25trace export parquet`.
-- reads: traces, trace_runs
-- params: none
-- grain: one row per trace
select traces.trace_id, traces.is_frontend, trace_runs.run_id
from traces
left join trace_runs using (trace_id)
order by traces.trace_id
