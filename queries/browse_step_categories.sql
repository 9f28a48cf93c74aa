-- name: browse_step_categories
-- Where one step's GPU wall time went: per category the exclusive time (only it running), summed kernel time and
-- calls, plus 'overlap' and 'idle' rows so that the shares add up to 100 %.
-- reads: steps, step_categories
-- params: $trace_id, $step_index
-- grain: one row per category of the step, 'overlap' and 'idle' included
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
)

select
    rows.category,
    round(rows.busy_ns / 1e6, 4) as busy_ms,
    round(rows.busy_ns * 100.0 / nullif(step_row.wall_ns, 0), 1) as pct_of_step,
    round(rows.kernel_ns / 1e6, 4) as kernel_ms,
    rows.calls
from rows, step_row
order by rows.category in ('overlap', 'idle'), rows.busy_ns desc, rows.category
