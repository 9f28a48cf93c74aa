-- name: compare_categories
-- One side of `k25trace compare`: per selected step (run and step index, summed over its ranks) and category,
-- the exclusive GPU time (only that category running), the summed kernel time and the calls. Divided by the
-- step's ranks (compare_steps) it is the per-step observation the category comparison tests.
-- reads: steps, step_categories, traces, trace_runs
-- params: $phase, $run_id, $level, $trace_ids, $rank, $batch_size
-- grain: one row per (run_id, step_index, category) present in the selected steps
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
    step_categories.category,
    sum(step_categories.busy_ns)::bigint as busy_ns,
    sum(step_categories.kernel_ns)::bigint as kernel_ns,
    sum(step_categories.kernel_count)::bigint as calls
from selected_steps
join step_categories using (trace_id, step_index)
group by all
order by all
