-- name: layers_report
-- report --by layer: per run, batch size and segment (pre, each layer, post) of the segmented steps of a phase
-- filter (selected_steps: $phase 'all' for any; $rank, $trace_id NULL for any; each rank's step is one
-- observation): steps, the median wall ms (the segment's share of the step's wall: overlap and idle included) and
-- busy ms, kind (the most common), evidence, the three categories with the most median exclusive time (with their
-- ms), its median busy time (GPU work; wall also holds host-bound idle) against the median layer's
-- (vs_median_layer: all layers of the run and batch size) and against the median layer of its kind (vs_kind), a
-- flag 'slow' when a layer's median busy time is at least 10 % over its kind's median layer, and the outlier
-- steps: those where the layer's wall is at least 25 % over its own median wall (step indexes, at most 10 listed;
-- outlier_steps counts them all).
-- reads: step_layers, step_layer_categories, selected_steps, trace_runs
-- params: $phase, $rank, $trace_id, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per run, batch size and segment label
with chosen as (
    select steps.trace_id, steps.step_index, coalesce(steps.batch_size, -1) as batch_size, trace_runs.run_id,
        coalesce(trace_runs.run_label, trace_runs.run_id) as run_label
    from selected_steps($phase, $rank, $trace_id, of_batch_size := $batch_size, of_run_id := $run_id) as steps
    join trace_runs using (trace_id)
),

segs as (
    select chosen.run_id, chosen.run_label, chosen.batch_size, step_layers.*
    from step_layers
    join chosen using (trace_id, step_index)
    where step_layers.evidence != 'none'
),

per_label as (
    select run_id, any_value(run_label) as run_label, batch_size, segment_index, label, any_value(layer) as layer,
        mode(kind order by kind) as kind, string_agg(distinct evidence, ',' order by evidence) as evidence,
        count(*) as steps, median(wall_ns) as wall_ns, median(busy_ns) as busy_ns, median(kernel_ns) as kernel_ns,
        median(kernel_count) as kernels, median(collectives) as collectives
    from segs
    group by run_id, batch_size, segment_index, label
),

layer_medians as (
    select run_id, batch_size, median(busy_ns) as all_ns from per_label where layer is not null group by all
),

kind_medians as (
    select run_id, batch_size, kind, median(busy_ns) as kind_ns from per_label where layer is not null group by all
),

categories as (
    select segs.run_id, segs.batch_size, segs.label, c.category, median(c.busy_ns) as busy_ns
    from segs
    join step_layer_categories as c using (trace_id, step_index, segment_index)
    group by all
),

top_categories as (
    select run_id, batch_size, label,
        string_agg(category || ' ' || printf('%.3f', busy_ns / 1e6), ', ' order by busy_ns desc, category)
            filter (where r <= 3) as top_categories
    from (select *, row_number() over (partition by run_id, batch_size, label order by busy_ns desc, category) as r
          from categories)
    group by all
),

outliers as (
    select segs.run_id, segs.batch_size, segs.label, count(*) as outlier_steps,
        string_agg(segs.step_index::varchar, ',' order by segs.step_index) filter (where r <= 10) as outlier_list
    from (select segs.*, row_number() over (partition by segs.run_id, segs.batch_size, segs.label
                                            order by segs.step_index, segs.trace_id) as r
          from segs
          join per_label using (run_id, batch_size, segment_index, label)
          where segs.wall_ns * 4 >= per_label.wall_ns * 5 and segs.layer is not null) as segs
    group by all
)

select per_label.run_label as run, nullif(per_label.batch_size, -1) as batch_size, per_label.label as segment,
    per_label.kind, per_label.evidence, per_label.steps,
    round(per_label.wall_ns / 1e6, 4) as wall_ms, round(per_label.busy_ns / 1e6, 4) as busy_ms,
    round(per_label.kernel_ns / 1e6, 4) as kernel_ms, per_label.kernels, per_label.collectives,
    top_categories.top_categories,
    case when per_label.layer is not null then round(per_label.busy_ns / nullif(layer_medians.all_ns, 0), 3) end
        as vs_median_layer,
    case when per_label.layer is not null then round(per_label.busy_ns / nullif(kind_medians.kind_ns, 0), 3) end
        as vs_kind,
    case when per_label.layer is not null and per_label.busy_ns >= 1.1 * kind_medians.kind_ns then 'slow' end as flag,
    coalesce(outliers.outlier_steps, 0) as outlier_steps, outliers.outlier_list
from per_label
left join layer_medians using (run_id, batch_size)
left join kind_medians using (run_id, batch_size, kind)
left join top_categories using (run_id, batch_size, label)
left join outliers using (run_id, batch_size, label)
order by per_label.run_label, per_label.run_id, per_label.batch_size, per_label.segment_index, per_label.label
