-- name: steps_build
-- Write the steps and step_categories rows of one trace from its markers, its assigned GPU activities and the
-- interval sweep: wall (first start -> last end), busy (union over streams), idle = wall - busy, overlap (two
-- or more categories at once); per category summed and exclusive time. busy = sum(exclusive) + overlap.
-- creates: steps (rows for one trace), step_categories (rows for one trace)
-- reads: _step_markers, _step_intervals, _category_codes, gpu_events, launches, traces
-- params: $trace_id
-- grain: steps = one row per step; step_categories = one row per step per category present
delete from steps where trace_id = $trace_id;

delete from step_categories where trace_id = $trace_id;

insert into steps
with activity as (
    select
        step_index,
        min(start_ns) as gpu_start_ns,
        max(end_ns) as gpu_end_ns,
        count(*) as kernel_count,
        sum(dur_ns) as kernel_ns
    from gpu_events
    where trace_id = $trace_id and step_index is not null
    group by step_index
),

sweep as (
    select
        step_index,
        sum(end_ns - start_ns) as busy_ns,
        sum(case when active_categories > 1 then end_ns - start_ns else 0 end) as overlap_ns
    from _step_intervals
    group by step_index
),

graph_launch_steps as (
    select _step_markers.step_index, count(*) as graph_launches
    from launches
    asof join _step_markers on launches.start_ns >= _step_markers.window_start_ns
    where launches.trace_id = $trace_id
        and launches.name in ('cudaGraphLaunch', 'hipGraphLaunch', 'cudaGraphLaunch_v10000', 'cuGraphLaunch')
        and launches.start_ns < _step_markers.window_end_ns
    group by _step_markers.step_index
)

select
    $trace_id,
    (select rank from traces where trace_id = $trace_id),
    m.step_index,
    m.marker,
    m.source,
    m.is_inferred,
    m.phase,
    m.ctx_reqs,
    m.ctx_tokens,
    m.gen_reqs,
    m.gen_tokens,
    m.total_tokens,
    m.batch_size,
    m.is_spec_decode,
    coalesce(a.kernel_count, 0) = 0 or m.phase = 'empty' as is_empty,
    m.marker_start_ns,
    m.marker_end_ns,
    coalesce(g.graph_launches, 0),
    a.gpu_start_ns,
    a.gpu_end_ns,
    coalesce(a.gpu_end_ns - a.gpu_start_ns, 0) as wall_ns,
    coalesce(s.busy_ns, 0) as busy_ns,
    coalesce(a.gpu_end_ns - a.gpu_start_ns, 0) - coalesce(s.busy_ns, 0) as idle_ns,
    coalesce(s.overlap_ns, 0) as overlap_ns,
    coalesce(a.kernel_count, 0),
    coalesce(a.kernel_ns, 0)
from _step_markers as m
left join activity as a using (step_index)
left join sweep as s using (step_index)
left join graph_launch_steps as g using (step_index);

insert into step_categories
with summed as (
    select step_index, coalesce(category, 'other') as category, sum(dur_ns) as kernel_ns, count(*) as kernel_count
    from gpu_events
    where trace_id = $trace_id and step_index is not null
    group by all
),

exclusive as (
    select step_index, _category_codes.category, sum(end_ns - start_ns) as busy_ns
    from _step_intervals
    join _category_codes on _category_codes.code = _step_intervals.code_sum
    where active_categories = 1
    group by all
)

select
    $trace_id,
    (select rank from traces where trace_id = $trace_id),
    summed.step_index,
    summed.category,
    summed.kernel_ns,
    coalesce(exclusive.busy_ns, 0),
    summed.kernel_count
from summed
left join exclusive using (step_index, category)
