-- name: compare_kernel_names
-- One side of `k25trace compare`: the GPU activity names that ran in the selected steps, full and short, with
-- their kind, for matching across the sides by exact name or by name family (k25trace.names.kernel_family).
-- reads: gpu_events, kernel_names, steps, traces, trace_runs
-- params: $phase, $run_id, $level, $trace_ids, $rank, $batch_size
-- grain: one row per name_id that ran in the selected steps
with selected_steps as (
    select steps.trace_id, steps.step_index
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
),

used as (
    select distinct gpu_events.name_id, gpu_events.kind
    from gpu_events
    join selected_steps using (trace_id, step_index)
)

select used.name_id, any_value(used.kind) as kind, kernel_names.name, kernel_names.short_name
from used
join kernel_names using (name_id)
group by used.name_id, kernel_names.name, kernel_names.short_name
order by used.name_id
