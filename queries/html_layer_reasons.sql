-- name: html_layer_reasons
-- Why the per-layer chart of `k25trace html` has nothing for some steps: per run and batch size, how many of the
-- steps the filters select (selected_steps: $phase 'all' for any; $rank, $trace_id, $batch_size, $run_id NULL for
-- any) were segmented into layers, how many were not, and each reason an unsegmented step carries
-- (step_layers.reason, with its count), the most common first.
-- reads: step_layers, selected_steps, trace_runs
-- params: $phase, $rank, $trace_id, $batch_size, $run_id
-- optional: $rank, $trace_id, $batch_size, $run_id
-- grain: one row per run, batch size and reason (reason NULL: the segmented steps)
with chosen as (
    select steps.trace_id, steps.step_index, coalesce(steps.batch_size, -1) as batch_size, trace_runs.run_id
    from selected_steps($phase, $rank, $trace_id, of_batch_size := $batch_size, of_run_id := $run_id) as steps
    join trace_runs using (trace_id)
),

per_step as (
    select chosen.run_id, chosen.batch_size, chosen.trace_id, chosen.step_index,
        bool_or(step_layers.evidence != 'none') as segmented,
        any_value(step_layers.reason) filter (where step_layers.evidence = 'none') as reason
    from chosen
    left join step_layers using (trace_id, step_index)
    group by all
)

select run_id, nullif(batch_size, -1) as batch_size,
    case when segmented then null else coalesce(reason, 'no layer segments stored') end as reason,
    count(*) as steps
from per_step
group by all
order by run_id, batch_size nulls last, reason nulls first, steps desc
