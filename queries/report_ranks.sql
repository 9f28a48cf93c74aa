-- name: report_ranks
-- Per run and rank, per category: mean exclusive ms per step and share of wall time over the selected steps, so
-- the ranks of a run can be compared side by side (a slow rank shows less AllReduce wait and more of everything
-- else). A run is as trace_runs defines it, so two files claiming the same rank are never merged.
-- reads: selected_steps (macro), step_categories, trace_runs
-- params: $phase, $trace_id, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per (run, rank, category), 'idle' included
with selected_steps as (
    select steps.*, coalesce(trace_runs.run_id, '?') as run_id
    from selected_steps($phase, null, $trace_id, of_batch_size := $batch_size, of_run_id := $run_id) as steps
    left join trace_runs using (trace_id)
),

per_rank as (
    select run_id, rank, count(*) as steps, sum(wall_ns) as wall_ns, sum(idle_ns) as idle_ns,
        sum(overlap_ns) as overlap_ns
    from selected_steps
    group by run_id, rank
),

per_category as (
    select selected_steps.run_id, selected_steps.rank, step_categories.category, sum(step_categories.busy_ns) as busy_ns,
        sum(step_categories.kernel_ns) as kernel_ns, sum(step_categories.kernel_count) as calls
    from selected_steps
    join step_categories using (trace_id, step_index)
    group by all
    union all
    select run_id, rank, 'overlap', overlap_ns, null, null from per_rank
    union all
    select run_id, rank, 'idle', idle_ns, null, null from per_rank
)

select
    per_category.run_id,
    per_category.rank,
    per_category.category,
    per_rank.steps,
    round(per_rank.wall_ns / per_rank.steps / 1e6, 4) as step_ms,
    round(per_category.busy_ns / per_rank.steps / 1e6, 4) as ms_per_step,
    round(per_category.busy_ns * 100.0 / nullif(per_rank.wall_ns, 0), 2) as pct_of_step,
    round(per_category.kernel_ns / per_rank.steps / 1e6, 4) as kernel_ms_per_step,
    round(per_category.calls / per_rank.steps, 2) as calls_per_step
from per_category
join per_rank on per_rank.run_id = per_category.run_id and per_rank.rank is not distinct from per_category.rank
order by per_category.run_id, per_category.rank nulls first, per_category.category in ('overlap', 'idle'),
    pct_of_step desc, per_category.category
