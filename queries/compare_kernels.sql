-- name: compare_kernels
-- One side of `k25trace compare`: per selected step (run and step index, summed over its ranks) and GPU activity
-- name, the calls and the summed duration, with the activity's category. The names themselves come from
-- compare_kernel_names; the comparison matches them across the sides (exact name, else name family).
-- reads: gpu_events, steps, traces, trace_runs
-- params: $phase, $run_id, $level, $trace_ids, $rank, $batch_size
-- grain: one row per (run_id, step_index, name_id, category) in the selected steps
with selected_steps as (
    select coalesce(trace_runs.run_id, traces.path) as run_id, steps.trace_id, steps.step_index
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
)

select
    selected_steps.run_id,
    selected_steps.step_index,
    gpu_events.name_id,
    gpu_events.category,
    count(*) as calls,
    sum(gpu_events.dur_ns)::bigint as kernel_ns
from gpu_events
join selected_steps using (trace_id, step_index)
group by all
order by all
