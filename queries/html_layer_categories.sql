-- name: html_layer_categories
-- The per-layer chart of `k25trace html`: per run, batch size and segment (pre, each layer, post) of the segmented
-- steps the filters select (selected_steps: $phase 'all' for any; $rank, $trace_id, $batch_size, $run_id NULL for
-- any; each rank's step is one observation, as report --by layer counts them), the median over those steps of
-- each category's exclusive time in the segment (step_layer_categories.busy_ns; a step where the category did not
-- run counts as 0), then of its overlap and its idle (step_layers.overlap_ns, idle_ns) as the categories
-- 'overlap' and 'idle', and the median wall and busy time of the segment.
-- reads: step_layers, step_layer_categories, selected_steps, trace_runs
-- params: $phase, $rank, $trace_id, $batch_size, $run_id
-- optional: $rank, $trace_id, $batch_size, $run_id
-- grain: one row per run, batch size, segment label and category (overlap and idle included)
with chosen as (
    select steps.trace_id, steps.step_index, coalesce(steps.batch_size, -1) as batch_size, trace_runs.run_id
    from selected_steps($phase, $rank, $trace_id, of_batch_size := $batch_size, of_run_id := $run_id) as steps
    join trace_runs using (trace_id)
),

segs as (
    select chosen.run_id, chosen.batch_size, step_layers.trace_id, step_layers.step_index,
        step_layers.segment_index, step_layers.label, step_layers.wall_ns, step_layers.busy_ns,
        step_layers.overlap_ns, step_layers.idle_ns
    from step_layers
    join chosen using (trace_id, step_index)
    where step_layers.evidence != 'none'
),

seg_order as (
    select run_id, batch_size, label, min(segment_index) as segment_index, count(*) as steps,
        median(wall_ns) as wall_ns, median(busy_ns) as busy_ns
    from segs
    group by all
),

present as (  -- every category that ran in the segment in any selected step
    select distinct segs.run_id, segs.batch_size, segs.label, c.category
    from segs
    join step_layer_categories as c using (trace_id, step_index, segment_index)
),

filled as (  -- one value per step and category of the segment: its exclusive time, 0 where it did not run
    select present.run_id, present.batch_size, present.label, present.category,
        coalesce(c.busy_ns, 0) as value_ns
    from present
    join segs using (run_id, batch_size, label)
    left join step_layer_categories as c
        on c.trace_id = segs.trace_id and c.step_index = segs.step_index
        and c.segment_index = segs.segment_index and c.category = present.category
    union all
    select run_id, batch_size, label, 'overlap', overlap_ns from segs
    union all
    select run_id, batch_size, label, 'idle', idle_ns from segs
)

select filled.run_id, nullif(filled.batch_size, -1) as batch_size, filled.label as segment,
    any_value(seg_order.segment_index) as segment_index, any_value(seg_order.steps) as steps,
    filled.category, median(filled.value_ns) / 1e6 as ms,
    any_value(seg_order.wall_ns) / 1e6 as wall_ms, any_value(seg_order.busy_ns) / 1e6 as busy_ms
from filled
join seg_order using (run_id, batch_size, label)
group by filled.run_id, filled.batch_size, filled.label, filled.category
order by filled.run_id, filled.batch_size nulls last, segment_index, filled.category
