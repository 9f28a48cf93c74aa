-- name: compare_categories
-- One side of `k25trace compare`: per selected step (run and step index, summed over its ranks) and category,
-- the exclusive GPU time (only that category running), the summed kernel time and the calls. Divided by the
-- step's ranks (compare_steps) it is the per-step observation the category comparison tests.
-- reads: _compare_selection, step_categories
-- params: none
-- grain: one row per (run_id, step_index, category) present in the selected steps
with selected_steps as (
    select run_id, trace_id, step_index from _compare_selection
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
