-- name: steps_build
-- Write the steps and step_categories rows of one trace from its markers (_step_markers, step_markers.sql), its
-- assigned GPU activities (step_assign.sql) and an interval sweep: wall (first start -> last end), busy (union over
-- streams), idle = wall - busy, overlap (two or more categories at once); per category summed and exclusive time.
-- busy = sum(exclusive) + overlap.
-- The sweep: the GPU activities of each step are cut into elementary time intervals (_step_intervals) and, for
-- each, how many distinct categories were running and (when exactly one) which (_category_codes numbers them).
-- The last reader of the step temp tables: it drops _step_intervals, _category_codes, _step_markers and _far_events
-- at the end. far_activities: the activities launched in the step's window whose GPU time lies more than 1 s outside
-- the trace's CPU-side span (step_assign.sql), kept out of the step.
-- creates: _category_codes (temp table, dropped), _step_intervals (temp table, dropped), steps (rows for one
--   trace), step_categories (rows for one trace)
-- reads: _step_markers, _far_events, gpu_events, launches, traces
-- params: $trace_id
-- grain: steps = one row per step; step_categories = one row per step per category present; _step_intervals = one
--   row per elementary interval between consecutive category on/off points within a step
create or replace temp table _category_codes as
select category, (row_number() over (order by category))::bigint as code
from (select distinct coalesce(category, 'other') as category from gpu_events where trace_id = $trace_id);

create or replace temp table _step_intervals as
with acts as materialized (
    select gpu_events.step_index, _category_codes.code, gpu_events.start_ns, gpu_events.end_ns
    from gpu_events
    join _category_codes on coalesce(gpu_events.category, 'other') = _category_codes.category
    where gpu_events.trace_id = $trace_id and gpu_events.step_index is not null
),

points as (
    select step_index, code, start_ns as t, 1 as delta from acts
    union all
    select step_index, code, end_ns, -1 from acts
),

per_time as (
    select step_index, code, t, sum(delta) as delta
    from points
    group by all
),

running as (  -- one ordered pass over all steps equals a pass per (step, category): every count that a step's
              -- activities raise they also lower, so each running sum is back at 0 where the next one begins
              -- (DuckDB runs the partitioned window ~4x slower); the same holds for final's sums and, as a step's
              -- last point has no active category, for its lead()
    select
        step_index, code, t, delta,
        sum(delta) over (order by step_index, code, t rows unbounded preceding) as running_count
    from per_time
),

transitions as (  -- the category turns on (+1) or off (-1) at t; its count before t is running_count - delta
    select step_index, t, code, (running_count > 0)::integer - (running_count - delta > 0)::integer as change
    from running
    where (running_count > 0) != (running_count - delta > 0)
),

per_point as (
    select step_index, t, sum(change) as active_change, sum(change * code) as code_change
    from transitions
    group by step_index, t
),

final as (
    select
        step_index,
        t as start_ns,
        lead(t) over (order by step_index, t) as end_ns,
        sum(active_change) over (order by step_index, t rows unbounded preceding) as active_categories,
        sum(code_change) over (order by step_index, t rows unbounded preceding) as code_sum
    from per_point
)

select * from final where end_ns is not null and end_ns > start_ns and active_categories > 0;

delete from steps where trace_id = $trace_id;

delete from step_categories where trace_id = $trace_id;

insert into steps by name
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
),

far_steps as (  -- the step whose window holds the far activity's launch (or its GPU start when it has none)
    select _step_markers.step_index, count(*) as far_activities
    from (select coalesce(min(launches.start_ns), any_value(gpu_events.start_ns)) as anchor_ns
          from gpu_events
          left join launches on launches.trace_id = gpu_events.trace_id
              and launches.correlation = gpu_events.correlation
          where gpu_events.trace_id = $trace_id and gpu_events.event_id in (select event_id from _far_events)
          group by gpu_events.event_id) as far
    asof join _step_markers on far.anchor_ns >= _step_markers.window_start_ns
    where far.anchor_ns < _step_markers.window_end_ns
    group by _step_markers.step_index
)

select
    $trace_id as trace_id,
    (select rank from traces where trace_id = $trace_id) as rank,
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
    coalesce(g.graph_launches, 0) as graph_launches,
    a.gpu_start_ns,
    a.gpu_end_ns,
    coalesce(a.gpu_end_ns - a.gpu_start_ns, 0) as wall_ns,
    coalesce(s.busy_ns, 0) as busy_ns,
    coalesce(a.gpu_end_ns - a.gpu_start_ns, 0) - coalesce(s.busy_ns, 0) as idle_ns,
    coalesce(s.overlap_ns, 0) as overlap_ns,
    coalesce(a.kernel_count, 0) as kernel_count,
    coalesce(a.kernel_ns, 0) as kernel_ns,
    coalesce(f.far_activities, 0) as far_activities
from _step_markers as m
left join activity as a using (step_index)
left join sweep as s using (step_index)
left join graph_launch_steps as g using (step_index)
left join far_steps as f using (step_index);

insert into step_categories by name
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
    $trace_id as trace_id,
    (select rank from traces where trace_id = $trace_id) as rank,
    summed.step_index,
    summed.category,
    summed.kernel_ns,
    coalesce(exclusive.busy_ns, 0) as busy_ns,
    summed.kernel_count
from summed
left join exclusive using (step_index, category);

drop table _step_intervals;

drop table _category_codes;

drop table _step_markers;

drop table _far_events;
