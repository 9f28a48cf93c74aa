-- name: step_times
-- The wall time of every step of the phase, with its run (trace_runs) and rank: the step-time distribution per
-- run and batch size (the same steps and wall_ms as `report --by step`).
-- reads: steps, trace_runs, traces
-- params: $phase
-- grain: one row per non-empty step per trace (rank)
select
    coalesce(trace_runs.run_id, traces.path) as run_id,
    traces.level,
    steps.batch_size,
    steps.trace_id,
    steps.rank,
    steps.step_index,
    round(steps.wall_ns / 1e6, 4) as wall_ms,
    round(steps.idle_ns / 1e6, 4) as idle_ms
from steps
join traces using (trace_id)
left join trace_runs using (trace_id)
where not steps.is_empty and ($phase = 'all' or steps.phase = $phase)
order by run_id, steps.batch_size nulls last, steps.rank, steps.step_index
