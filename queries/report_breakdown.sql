-- name: report_breakdown
-- Where the time of a step goes, per run (the ranks of one capture level or directory) and batch size: for each category the mean exclusive GPU
-- time per step (time only that category ran), its share of the step's wall time, the summed kernel time,
-- calls per step and mean µs per call; plus 'overlap' (several categories at once) and 'idle' (no GPU activity)
-- rows, so that the shares of one group add up to 100 %; 'other' is always listed. Empty steps are left out.
-- reads: selected_steps (macro), step_categories, traces, trace_runs
-- params: $phase, $rank, $trace_id, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per (run_id, batch_size, category) — 'overlap' and 'idle' included
with selected_steps as (
    select steps.*, traces.level, coalesce(trace_runs.run_id, traces.path) as run_id
    from selected_steps($phase, $rank, $trace_id, of_batch_size := $batch_size, of_run_id := $run_id) as steps
    join traces using (trace_id)
    left join trace_runs using (trace_id)
),

groups as (
    select
        run_id,
        any_value(level) as level,
        batch_size,
        count(*) as steps,
        count(distinct rank) as ranks,
        sum(wall_ns) as wall_ns,
        sum(busy_ns) as busy_ns,
        sum(idle_ns) as idle_ns,
        sum(overlap_ns) as overlap_ns,
        median(wall_ns) as median_wall_ns
    from selected_steps
    group by run_id, batch_size
),

per_category as (
    select
        selected_steps.run_id,
        selected_steps.batch_size,
        step_categories.category,
        sum(step_categories.busy_ns) as busy_ns,
        sum(step_categories.kernel_ns) as kernel_ns,
        sum(step_categories.kernel_count) as calls
    from selected_steps
    join step_categories using (trace_id, step_index)
    group by all
),

pseudo as (
    -- 'other' is always shown (0 when every kernel matched a rule), so missing rules are visible
    select groups.run_id, groups.batch_size, 'other' as category, 0::hugeint as busy_ns, 0::hugeint as kernel_ns, 0::hugeint as calls
    from groups
    where not exists (
        select 1 from per_category
        where per_category.category = 'other'
            and per_category.run_id = groups.run_id
            and per_category.batch_size is not distinct from groups.batch_size
    )
    union all
    select run_id, batch_size, 'overlap' as category, overlap_ns as busy_ns, null::hugeint as kernel_ns, null::hugeint as calls from groups
    union all
    select run_id, batch_size, 'idle', idle_ns, null, null from groups
),

rows as (
    select * from per_category
    union all
    select * from pseudo
),

final as (
    select
        rows.run_id,
        groups.level,
        rows.batch_size,
        rows.category,
        groups.steps,
        groups.ranks,
        round(groups.wall_ns / groups.steps / 1e6, 4) as step_ms,
        round(groups.median_wall_ns / 1e6, 4) as median_step_ms,
        round(groups.idle_ns * 100.0 / nullif(groups.wall_ns, 0), 2) as idle_pct,
        round(rows.busy_ns / groups.steps / 1e6, 4) as ms_per_step,
        round(rows.busy_ns * 100.0 / nullif(groups.wall_ns, 0), 2) as pct_of_step,
        round(rows.kernel_ns / groups.steps / 1e6, 4) as kernel_ms_per_step,
        round(rows.calls / groups.steps, 2) as calls_per_step,
        round(rows.kernel_ns / nullif(rows.calls, 0) / 1e3, 2) as us_per_call
    from rows
    join groups on groups.run_id = rows.run_id and groups.batch_size is not distinct from rows.batch_size
)

select * from final
order by run_id, batch_size nulls last, category in ('overlap', 'idle'), pct_of_step desc, category
