-- name: browse_step_layers
-- The layer strip of the TUI's step screen: one step's segments in order (step_layers: pre, layers 0..L-1, post;
-- one `step` row with its reason when the step is not segmented), each with its kind, evidence, window, wall, busy,
-- idle, overlap and kernel ms, its activities' positions in the step's order (first_pos, kernel_count: the
-- segment's kernels are browse_step_kernels' with them), its busy time against the median layer of its kind in this
-- step (vs_kind; layers only), slow when that is 1.15 or more (report --by layer flags 1.1 over medians of many
-- steps; one step is noisier), and its category split (categories: per category the exclusive busy ms, kernel ms
-- and calls, the busiest first).
-- reads: step_layers, step_layer_categories
-- params: $trace_id, $step_index
-- grain: one row per segment of the step (none when the step has no step_layers rows)
with segs as (
    select *
    from step_layers
    where trace_id = $trace_id and step_index = $step_index
),

kind_medians as (
    select kind, median(busy_ns) as kind_ns from segs where layer is not null group by kind
),

split as (
    select segment_index,
        list({'category': category, 'busy_ms': round(busy_ns / 1e6, 4), 'kernel_ms': round(kernel_ns / 1e6, 4),
              'calls': kernel_count} order by busy_ns desc, category) as categories
    from step_layer_categories
    where trace_id = $trace_id and step_index = $step_index
    group by segment_index
)

select
    segs.segment_index,
    segs.label,
    segs.layer,
    segs.kind,
    segs.evidence,
    segs.layers,
    segs.reason,
    segs.start_ns,
    segs.end_ns,
    round(segs.wall_ns / 1e6, 4) as wall_ms,
    round(segs.busy_ns / 1e6, 4) as busy_ms,
    round(segs.idle_ns / 1e6, 4) as idle_ms,
    round(segs.overlap_ns / 1e6, 4) as overlap_ms,
    round(segs.kernel_ns / 1e6, 4) as kernel_ms,
    segs.kernel_count,
    segs.collectives,
    segs.first_pos,
    case when segs.layer is not null then round(segs.busy_ns / nullif(kind_medians.kind_ns, 0), 3) end as vs_kind,
    coalesce(segs.layer is not null and segs.busy_ns >= 1.15 * kind_medians.kind_ns, false) as slow,
    coalesce(split.categories, []) as categories
from segs
left join kind_medians using (kind)
left join split using (segment_index)
order by segs.segment_index
