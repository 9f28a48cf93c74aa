-- name: browse_step_layer_kernels
-- One segment of a step's GPU activities, a page at a time ($offset, $limit, within the segment): the step's
-- activities numbered in the order the layer segmentation numbers them (start_ns, end_ns, event_id:
-- layers_sequence.sql), those at positions $first_pos .. $first_pos + $count - 1 (a browse_step_layers row's
-- first_pos and kernel_count), with browse_step_kernels' columns (offset_us from the step's GPU start). $start_ns
-- and $end_ns are the step's GPU span (steps.gpu_start_ns/gpu_end_ns): DuckDB skips the rest of gpu_events.
-- reads: gpu_events, kernel_names
-- params: $trace_id, $step_index, $start_ns, $end_ns, $first_pos, $count, $offset, $limit
-- grain: one row per GPU activity of the segment, at most $limit
with step_events as (
    select event_id, kind, name_id, stream, start_ns, end_ns, dur_ns, category,
        (row_number() over (order by start_ns, end_ns, event_id) - 1)::integer as pos
    from gpu_events
    where trace_id = $trace_id
        and start_ns between $start_ns and $end_ns
        and step_index = $step_index
),

segment_events as (
    select *
    from step_events
    where pos >= $first_pos and pos < $first_pos + $count
    order by pos
    limit $limit offset $offset
)

select
    segment_events.event_id,
    segment_events.start_ns,
    round((segment_events.start_ns - $start_ns) / 1e3, 1) as offset_us,
    round(segment_events.dur_ns / 1e3, 1) as dur_us,
    coalesce(segment_events.category, 'other') as category,
    kernel_names.short_name,
    segment_events.stream,
    segment_events.kind,
    segment_events.name_id
from segment_events
join kernel_names using (name_id)
order by segment_events.pos
