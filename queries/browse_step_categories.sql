-- name: browse_step_categories
-- Where one step's GPU wall time went: per category the exclusive time (only it running), summed kernel time and
-- calls, plus 'overlap' and 'idle' rows so that the shares add up to 100 %.
-- reads: steps, step_categories, gpu_gaps
-- params: $trace_id, $step_index
-- grain: one row per category of the step, 'overlap' and 'idle' included, then 'idle: <cause>' rows (the idle
--   time split by cause, queries/gaps_build.sql) and 'gap before step' (GPU idle since the previous step)
with step_row as (
    select wall_ns, idle_ns, overlap_ns
    from steps
    where trace_id = $trace_id and step_index = $step_index
),

rows as (
    select category, busy_ns, kernel_ns, kernel_count as calls
    from step_categories
    where trace_id = $trace_id and step_index = $step_index
    union all
    select 'overlap', overlap_ns, null, null from step_row
    union all
    select 'idle', idle_ns, null, null from step_row
    union all  -- the idle time by cause (gpu_gaps; they add up to idle) and the gap before the step
    select 'idle: ' || cause_name, sum(part_ns), null, count(*) filter (where part_ns > 0)
    from (
        select unnest(['host-bound', 'after sync', 'launch overhead', 'device-bound', 'unknown']) as cause_name,
            unnest([host_ns, sync_ns, launch_ns, device_ns, unknown_ns]) as part_ns
        from gpu_gaps
        where trace_id = $trace_id and step_index = $step_index and not between_steps
    )
    group by cause_name
    having sum(part_ns) > 0
    union all
    select 'gap before step', sum(dur_ns), null, count(*)
    from gpu_gaps
    where trace_id = $trace_id and step_index = $step_index and between_steps
    having count(*) > 0
)

select
    rows.category,
    round(rows.busy_ns / 1e6, 4) as busy_ms,
    round(rows.busy_ns * 100.0 / nullif(step_row.wall_ns, 0), 1) as pct_of_step,
    round(rows.kernel_ns / 1e6, 4) as kernel_ms,
    rows.calls
from rows, step_row
order by rows.category in ('overlap', 'idle') or rows.category like 'idle: %' or rows.category = 'gap before step',
    rows.category like 'idle: %', rows.category = 'gap before step', rows.busy_ns desc, rows.category
