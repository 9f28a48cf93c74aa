-- name: report_ranks
-- Per rank, per category: mean exclusive ms per step and share of wall time over the selected steps, so ranks
-- can be compared side by side (a slow rank shows less AllReduce wait and more of everything else).
-- reads: steps, step_categories
-- params: $phase, $trace_id
-- grain: one row per (rank, category), 'idle' included
with selected_steps as (
    select *
    from steps
    where not is_empty
        and ($phase = 'all' or phase = $phase)
        and ($trace_id is null or trace_id = $trace_id)
),

per_rank as (
    select rank, count(*) as steps, sum(wall_ns) as wall_ns, sum(idle_ns) as idle_ns, sum(overlap_ns) as overlap_ns
    from selected_steps
    group by rank
),

per_category as (
    select selected_steps.rank, step_categories.category, sum(step_categories.busy_ns) as busy_ns,
        sum(step_categories.kernel_ns) as kernel_ns, sum(step_categories.kernel_count) as calls
    from selected_steps
    join step_categories using (trace_id, step_index)
    group by all
    union all
    select rank, 'overlap', overlap_ns, null, null from per_rank
    union all
    select rank, 'idle', idle_ns, null, null from per_rank
)

select
    per_category.rank,
    per_category.category,
    per_rank.steps,
    round(per_rank.wall_ns / per_rank.steps / 1e6, 4) as step_ms,
    round(per_category.busy_ns / per_rank.steps / 1e6, 4) as ms_per_step,
    round(per_category.busy_ns * 100.0 / nullif(per_rank.wall_ns, 0), 2) as pct_of_step,
    round(per_category.kernel_ns / per_rank.steps / 1e6, 4) as kernel_ms_per_step,
    round(per_category.calls / per_rank.steps, 2) as calls_per_step
from per_category
join per_rank on per_rank.rank is not distinct from per_category.rank
order by per_category.rank nulls first, per_category.category in ('overlap', 'idle'), pct_of_step desc, per_category.category
