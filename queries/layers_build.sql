-- name: layers_build
-- Write the step_layers and step_layer_categories rows of one trace from its layer plan (_layer_plan,
-- layers_infer.sql) and its step activities (_layer_seq, layers_sequence.sql). Each segment's activities are the
-- positions first_pos .. end_pos - 1 of the step's order; its time window starts at its first activity's start
-- (`pre` at the step's GPU start, an empty `post` at the step's end) and ends where the next segment's starts
-- (the last one at the step's GPU end), so the windows of a step tile its wall exactly: overlap and idle belong
-- to the segment whose window holds them. busy, overlap and the categories' exclusive time: an activity that no
-- other overlaps (_layer_seq.alone) lies inside its segment's window and counts whole; the others go through an
-- interval sweep (as steps_build.sql's, with every segment start as a cut point), so they add up over the
-- segments to the step's busy_ns, overlap_ns and step_categories.busy_ns exactly; kernel_ns and kernel_count
-- are the segment's own activities'. An unsegmented step's one row is its steps / step_categories row.
-- The kind: the model config's (layers_infer.sql), else moe when the layer runs an expert-routing kernel (category
-- moe_routing or all2all, or a name with moe, expert, topk or grouped_mm/grouped_gemm), else dense.
-- The last reader of the layer temp tables: it drops _layer_plan and _layer_seq.
-- creates: _layer_codes, _layer_windows, _layer_intervals, _layer_members (temp tables, dropped),
--   step_layers (rows for one trace), step_layer_categories (rows for one trace)
-- reads: _layer_plan, _layer_seq, steps, step_categories, kernel_names, traces
-- params: $trace_id
-- grain: step_layers = one row per segment per step; step_layer_categories = one row per segment per category
--   present
create or replace temp table _layer_windows as
with plan as (
    select _layer_plan.*, count(*) over (partition by step_index) as segments
    from _layer_plan
),

firsts as (
    select plan.step_index, plan.segment_index, _layer_seq.start_ns as first_start_ns,
        _layer_seq.event_id as first_event_id
    from plan
    join _layer_seq on _layer_seq.step_index = plan.step_index and _layer_seq.pos = plan.first_pos
    where plan.first_pos < plan.end_pos
),

bounded as (
    select plan.*, firsts.first_event_id,
        case when plan.segment_index = 0 then steps.gpu_start_ns
             else coalesce(firsts.first_start_ns, steps.gpu_end_ns) end as start_ns,
        steps.gpu_end_ns as step_end_ns
    from plan
    join steps on steps.trace_id = $trace_id and steps.step_index = plan.step_index
    left join firsts on firsts.step_index = plan.step_index and firsts.segment_index = plan.segment_index
)

select bounded.* exclude (step_end_ns),
    coalesce(lead(start_ns) over (partition by step_index order by segment_index), step_end_ns) as end_ns
from bounded;

create or replace temp table _layer_codes as
select category, (row_number() over (order by category))::bigint as code
from (select distinct category from _layer_seq);

create or replace temp table _layer_intervals as
with acts as materialized (
    select _layer_seq.step_index, _layer_codes.code, _layer_seq.start_ns, _layer_seq.end_ns
    from _layer_seq
    join _layer_codes using (category)
    where not _layer_seq.alone
        and _layer_seq.step_index in (select step_index from _layer_windows where segments > 1)
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

running as (  -- one ordered pass, as in steps_build.sql
    select step_index, code, t, delta,
        sum(delta) over (order by step_index, code, t rows unbounded preceding) as running_count
    from per_time
),

transitions as (
    select step_index, t, code, (running_count > 0)::integer - (running_count - delta > 0)::integer as change
    from running
    where (running_count > 0) != (running_count - delta > 0)
),

per_point as (
    select step_index, t, sum(change) as active_change, sum(change * code) as code_change
    from (select step_index, t, change, code from transitions
          union all  -- every segment start cuts the sweep (no change there)
          select step_index, start_ns, 0, 0 from _layer_windows
          where segments > 1 and segment_index > 0 and step_index in (select step_index from acts))
    group by step_index, t
),

final as (
    select step_index, t as start_ns,
        lead(t) over (order by step_index, t) as end_ns,
        sum(active_change) over (order by step_index, t rows unbounded preceding) as active_categories,
        sum(code_change) over (order by step_index, t rows unbounded preceding) as code_sum
    from per_point
)

select * from final where end_ns is not null and end_ns > start_ns and active_categories > 0;

delete from step_layers where trace_id = $trace_id;

delete from step_layer_categories where trace_id = $trace_id;

create or replace temp table _layer_members as
select w.step_index, w.segment_index, s.category, s.token, s.dur_ns, s.alone
from _layer_seq as s
asof join (select step_index, segment_index, first_pos from _layer_windows where first_pos < end_pos) as w
    on s.step_index = w.step_index and s.pos >= w.first_pos;

insert into step_layers by name
with timed as (
    select w.step_index, w.segment_index,
        sum(i.end_ns - i.start_ns) as busy_ns,
        sum(case when i.active_categories > 1 then i.end_ns - i.start_ns else 0 end) as overlap_ns
    from _layer_intervals as i
    asof join (select * from _layer_windows where end_ns > start_ns) as w
        on i.step_index = w.step_index and i.start_ns >= w.start_ns
    group by all
),

routing as (
    select name_id as token
    from kernel_names
    where name_id in (select distinct token from _layer_seq)
        and regexp_matches(short_name, '(?i)(moe|expert|topk|grouped_?(mm|gemm))')
),

members as (
    select step_index, segment_index, count(*) as kernel_count, sum(dur_ns) as kernel_ns,
        count(*) filter (where category in ('allreduce', 'all2all', 'comm_other')) as collectives,
        coalesce(sum(dur_ns) filter (where alone), 0) as alone_ns,
        bool_or(category in ('moe_routing', 'all2all') or token in (select token from routing)) as routed
    from _layer_members
    group by all
)

select
    $trace_id as trace_id,
    (select rank from traces where trace_id = $trace_id) as rank,
    w.step_index,
    w.segment_index,
    w.label,
    w.layer,
    case when w.config_kind is not null then w.config_kind
         when coalesce(m.routed, false) then 'moe' else 'dense' end as kind,
    w.evidence,
    w.layers,
    w.reason,
    w.start_ns,
    w.end_ns,
    coalesce(w.end_ns - w.start_ns, 0) as wall_ns,
    case when w.segments > 1 then coalesce(t.busy_ns, 0) + coalesce(m.alone_ns, 0) else steps.busy_ns end as busy_ns,
    coalesce(w.end_ns - w.start_ns, 0)
        - case when w.segments > 1 then coalesce(t.busy_ns, 0) + coalesce(m.alone_ns, 0) else steps.busy_ns end
        as idle_ns,
    case when w.segments > 1 then coalesce(t.overlap_ns, 0) else steps.overlap_ns end as overlap_ns,
    coalesce(m.kernel_count, 0) as kernel_count,
    coalesce(m.kernel_ns, 0) as kernel_ns,
    coalesce(m.collectives, 0) as collectives,
    w.first_pos,
    w.first_event_id
from _layer_windows as w
join steps on steps.trace_id = $trace_id and steps.step_index = w.step_index
left join members as m on m.step_index = w.step_index and m.segment_index = w.segment_index
left join timed as t on t.step_index = w.step_index and t.segment_index = w.segment_index;

insert into step_layer_categories by name
with summed as (
    select step_index, segment_index, category, sum(dur_ns) as kernel_ns, count(*) as kernel_count,
        coalesce(sum(dur_ns) filter (where alone), 0) as alone_ns
    from _layer_members
    group by all
),

exclusive as (
    select w.step_index, w.segment_index, _layer_codes.category, sum(i.end_ns - i.start_ns) as busy_ns
    from _layer_intervals as i
    asof join (select * from _layer_windows where end_ns > start_ns) as w
        on i.step_index = w.step_index and i.start_ns >= w.start_ns
    join _layer_codes on _layer_codes.code = i.code_sum
    where i.active_categories = 1
    group by all
),

single as (  -- unsegmented steps: the step's own category rows
    select step_categories.step_index, 0 as segment_index, step_categories.category, step_categories.busy_ns
    from step_categories
    where step_categories.trace_id = $trace_id
        and step_categories.step_index in (select step_index from _layer_windows where segments = 1)
)

select
    $trace_id as trace_id,
    (select rank from traces where trace_id = $trace_id) as rank,
    summed.step_index,
    summed.segment_index,
    summed.category,
    summed.kernel_ns,
    case when single.busy_ns is not null then single.busy_ns
         else summed.alone_ns + coalesce(exclusive.busy_ns, 0) end as busy_ns,
    summed.kernel_count
from summed
left join exclusive using (step_index, segment_index, category)
left join single using (step_index, segment_index, category);

drop table _layer_members;

drop table _layer_intervals;

drop table _layer_codes;

drop table _layer_windows;

drop table _layer_plan;

drop table _layer_seq;
