-- name: report_steps
-- One line per engine step: phase, batch size, GPU wall/busy/idle, kernel count, AllReduce share and the top
-- categories by exclusive time.
-- reads: phase_steps (macro), step_categories
-- params: $phase, $rank, $trace_id, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per step per trace (rank), empty steps included
with selected_steps as (
    select * from phase_steps($phase, $rank, $trace_id, of_batch_size := $batch_size, of_run_id := $run_id)
),

ranked as (
    select
        trace_id, step_index, category, busy_ns,
        row_number() over (partition by trace_id, step_index order by busy_ns desc, category) as position
    from step_categories
    where busy_ns > 0
),

top_categories as (
    select trace_id, step_index, string_agg(category, ', ' order by position) as top_categories
    from ranked
    where position <= 3
    group by all
),

allreduce as (
    select trace_id, step_index, busy_ns as allreduce_ns
    from step_categories
    where category = 'allreduce'
)

select
    s.trace_id,
    s.rank,
    s.step_index,
    s.phase,
    s.batch_size,
    s.ctx_tokens,
    s.gen_tokens,
    s.is_empty,
    s.is_inferred,
    s.graph_launches,
    s.kernel_count,
    round(s.wall_ns / 1e6, 4) as wall_ms,
    round(s.busy_ns / 1e6, 4) as busy_ms,
    round(s.idle_ns / 1e6, 4) as idle_ms,
    round(s.busy_ns * 100.0 / nullif(s.wall_ns, 0), 2) as busy_pct,
    round(coalesce(a.allreduce_ns, 0) * 100.0 / nullif(s.wall_ns, 0), 2) as allreduce_pct,
    t.top_categories,
    s.marker
from selected_steps as s
left join top_categories as t using (trace_id, step_index)
left join allreduce as a using (trace_id, step_index)
order by s.trace_id, s.step_index
