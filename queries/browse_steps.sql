-- name: browse_steps
-- The steps of one trace (one rank): phase, batch size, GPU wall/busy/idle, kernel count, AllReduce share and
-- the top three categories by exclusive time, optionally only one phase ($phase, or 'all') and batch size.
-- reads: phase_steps (macro), step_categories
-- params: $trace_id, $phase, $batch_size
-- grain: one row per step of the trace
with selected_steps as (
    select *
    from phase_steps($phase, null, $trace_id)
    where $batch_size is null or batch_size = $batch_size
),

trace_categories as (
    select step_index, category, busy_ns
    from step_categories
    where trace_id = $trace_id
),

ranked as (
    select
        step_index, category,
        row_number() over (partition by step_index order by busy_ns desc, category) as position
    from trace_categories
    where busy_ns > 0
),

top_categories as (
    select step_index, string_agg(category, ', ' order by position) as top_categories
    from ranked
    where position <= 3
    group by step_index
),

allreduce as (
    select step_index, busy_ns as allreduce_ns
    from trace_categories
    where category = 'allreduce'
),

final as (
    select
        selected_steps.step_index,
        selected_steps.phase,
        selected_steps.batch_size,
        round(selected_steps.wall_ns / 1e6, 4) as wall_ms,
        round(selected_steps.busy_ns * 100.0 / nullif(selected_steps.wall_ns, 0), 1) as busy_pct,
        round(selected_steps.idle_ns / 1e6, 4) as idle_ms,
        selected_steps.kernel_count,
        round(coalesce(allreduce.allreduce_ns, 0) * 100.0 / nullif(selected_steps.wall_ns, 0), 1) as allreduce_pct,
        top_categories.top_categories,
        selected_steps.is_empty,
        selected_steps.is_inferred
    from selected_steps
    left join top_categories using (step_index)
    left join allreduce using (step_index)
)

select * from final
order by step_index
