-- name: compare_kernel_names
-- One side of `k25trace compare`: the GPU activity names that ran in the selected steps, full and short, with
-- their kind, for matching across the sides by exact name or by name family (k25trace.names.kernel_family).
-- reads: _compare_selection, gpu_events, kernel_names
-- params: none
-- grain: one row per name_id that ran in the selected steps
with selected_steps as (
    select trace_id, step_index from _compare_selection
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
