-- name: browse_step_kernels
-- The GPU activities of one step in time order, a page at a time ($offset, $limit): offset from the step's
-- first GPU activity, duration, category, short name, stream. $start_ns/$end_ns are the step's GPU span
-- (steps.gpu_start_ns/gpu_end_ns) and let DuckDB skip the rest of gpu_events (sorted by trace_id, start_ns).
-- reads: gpu_events, kernel_names
-- params: $trace_id, $step_index, $start_ns, $end_ns, $offset, $limit
-- grain: one row per GPU activity of the step, at most $limit
with step_events as (
    select event_id, kind, name_id, stream, start_ns, dur_ns, category
    from gpu_events
    where trace_id = $trace_id
        and start_ns between $start_ns and $end_ns
        and step_index = $step_index
    order by start_ns, event_id
    limit $limit offset $offset
)

select
    step_events.event_id,
    step_events.start_ns,
    round((step_events.start_ns - $start_ns) / 1e3, 1) as offset_us,
    round(step_events.dur_ns / 1e3, 1) as dur_us,
    coalesce(step_events.category, 'other') as category,
    kernel_names.short_name,
    step_events.stream,
    step_events.kind,
    step_events.name_id
from step_events
join kernel_names using (name_id)
order by step_events.start_ns, step_events.event_id
