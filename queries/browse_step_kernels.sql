-- name: browse_step_kernels
-- The GPU activities of one step in time order, a page at a time ($offset, $limit): offset from the step's
-- first GPU activity, duration, category, short name, stream. $start_ns/$end_ns are the step's GPU span
-- (steps.gpu_start_ns/gpu_end_ns) and let DuckDB skip the rest of gpu_events (sorted by trace_id, start_ns).
-- With $first_pos and $count, one layer segment of the step instead (the page is within the segment): the
-- step's activities numbered in the order the layer segmentation numbers them (start_ns, end_ns, event_id:
-- layers_sequence.sql), those at positions $first_pos .. $first_pos + $count - 1 (a browse_step_layers row's
-- first_pos and kernel_count). The whole step is in (start_ns, event_id) order, a segment in that position order.
-- reads: gpu_events, kernel_names
-- params: $trace_id, $step_index, $start_ns, $end_ns, $first_pos, $count, $offset, $limit
-- optional: $first_pos, $count
-- grain: one row per GPU activity of the step (or of the segment), at most $limit
with step_events as (
    select event_id, kind, name_id, stream, start_ns, end_ns, dur_ns, category,
        (row_number() over (order by start_ns, end_ns, event_id) - 1)::integer as pos
    from gpu_events
    where trace_id = $trace_id
        and start_ns between $start_ns and $end_ns
        and step_index = $step_index
),

page as (
    select *, case when $first_pos is null then event_id else pos end as tiebreak
    from step_events
    where $first_pos is null or (pos >= $first_pos and pos < $first_pos + $count)
    order by start_ns, tiebreak
    limit $limit offset $offset
)

select
    page.event_id,
    page.start_ns,
    round((page.start_ns - $start_ns) / 1e3, 1) as offset_us,
    round(page.dur_ns / 1e3, 1) as dur_us,
    coalesce(page.category, 'other') as category,
    kernel_names.short_name,
    page.stream,
    page.kind,
    page.name_id
from page
join kernel_names using (name_id)
order by page.start_ns, page.tiebreak
