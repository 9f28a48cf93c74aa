-- name: run_steps
-- The steps of one run, one line per step_index (the same index on every rank): its batch size and phase, on how
-- many ranks it was found, its mean GPU wall time, whether it is empty; to choose the steps to export.
-- reads: steps, trace_runs
-- params: $run_id
-- grain: one row per step_index of the run
select
    steps.step_index,
    any_value(steps.batch_size) as batch_size,
    any_value(steps.phase) as phase,
    count(distinct steps.rank) as ranks,
    bool_and(steps.is_empty) as is_empty,
    bool_or(steps.is_inferred) as inferred,
    round(avg(steps.wall_ns) / 1e6, 4) as wall_ms
from steps
join trace_runs using (trace_id)
where trace_runs.run_id = $run_id
group by steps.step_index
order by steps.step_index
