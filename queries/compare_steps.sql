-- name: compare_steps
-- One side of `k25trace compare`: the selected steps (a run, a capture level, some traces, a rank, a batch size,
-- or everything; NULL parameters select all) with their wall, busy, idle and overlap time. The comparison averages
-- a step over its ranks (one observation per run and step index) and tests step-to-step variation.
-- reads: steps, traces, trace_runs
-- params: $phase, $run_id, $level, $trace_ids, $rank, $batch_size
-- grain: one row per step per trace (rank); empty steps left out
select
    coalesce(trace_runs.run_id, traces.path) as run_id,
    traces.level,
    steps.trace_id,
    steps.rank,
    steps.step_index,
    steps.phase,
    steps.batch_size,
    steps.wall_ns,
    steps.busy_ns,
    steps.idle_ns,
    steps.overlap_ns,
    steps.kernel_count
from steps
join traces using (trace_id)
left join trace_runs using (trace_id)
where not steps.is_empty
    and not traces.is_frontend
    and ($phase = 'all' or steps.phase = $phase)
    and ($run_id is null or trace_runs.run_id = $run_id)
    and ($level is null or traces.level = $level)
    and ($trace_ids is null or list_contains($trace_ids, steps.trace_id))
    and ($rank is null or steps.rank = $rank)
    and ($batch_size is null or steps.batch_size = $batch_size)
order by run_id, steps.step_index, steps.rank
