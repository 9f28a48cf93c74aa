-- name: report_category
-- The breakdown over all selected steps regardless of batch size: per category mean exclusive ms per step,
-- share of wall time, summed kernel ms, calls per step, µs per call; 'overlap' and 'idle' rows complete 100 %.
-- reads: selected_steps (macro), step_categories
-- params: $phase, $rank, $trace_id, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per category
with selected_steps as (
    select * from selected_steps($phase, $rank, $trace_id, of_batch_size := $batch_size, of_run_id := $run_id)
),

totals as (
    select count(*) as steps, sum(wall_ns) as wall_ns, sum(idle_ns) as idle_ns, sum(overlap_ns) as overlap_ns
    from selected_steps
),

per_category as (
    select
        step_categories.category,
        sum(step_categories.busy_ns) as busy_ns,
        sum(step_categories.kernel_ns) as kernel_ns,
        sum(step_categories.kernel_count) as calls
    from selected_steps
    join step_categories using (trace_id, step_index)
    group by all
    union all
    select 'other', 0, 0, 0 from totals
    where not exists (select 1 from selected_steps join step_categories using (trace_id, step_index) where category = 'other')
    union all
    select 'overlap', overlap_ns, null, null from totals
    union all
    select 'idle', idle_ns, null, null from totals
)

select
    per_category.category,
    totals.steps,
    round(per_category.busy_ns / totals.steps / 1e6, 4) as ms_per_step,
    round(per_category.busy_ns * 100.0 / nullif(totals.wall_ns, 0), 2) as pct_of_step,
    round(per_category.kernel_ns / totals.steps / 1e6, 4) as kernel_ms_per_step,
    round(per_category.calls / totals.steps, 2) as calls_per_step,
    round(per_category.kernel_ns / nullif(per_category.calls, 0) / 1e3, 2) as us_per_call
from per_category, totals
where totals.steps > 0
order by per_category.category in ('overlap', 'idle'), pct_of_step desc, per_category.category
