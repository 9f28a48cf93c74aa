-- name: compare_kernels
-- One side of `k25trace compare`: per selected step (run and step index, summed over its ranks) and GPU activity
-- name, the calls and the summed duration, with the activity's category. The names themselves come from
-- compare_kernel_names; the comparison matches them across the sides (exact name, else name family).
-- reads: _compare_selection, gpu_events
-- params: none
-- grain: one row per (run_id, step_index, name_id, category) in the selected steps
with selected_steps as (
    select run_id, trace_id, step_index from _compare_selection
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
