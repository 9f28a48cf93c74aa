-- name: step_intervals
-- Sweep the GPU activities of each step of one trace into elementary time intervals and, for each, how many
-- distinct categories were running and (when exactly one) which: the base of busy, exclusive and overlap time.
-- creates: _step_intervals (temp table), _category_codes (temp table)
-- reads: gpu_events
-- params: $trace_id
-- grain: one row per elementary interval between consecutive category on/off points within a step
create or replace temp table _category_codes as
select category, (row_number() over (order by category))::bigint as code
from (select distinct coalesce(category, 'other') as category from gpu_events where trace_id = $trace_id);

create or replace temp table _step_intervals as
with points as (
    select step_index, coalesce(category, 'other') as category, start_ns as t, 1 as delta
    from gpu_events where trace_id = $trace_id and step_index is not null
    union all
    select step_index, coalesce(category, 'other'), end_ns, -1
    from gpu_events where trace_id = $trace_id and step_index is not null
),

per_time as (
    select step_index, category, t, sum(delta) as delta
    from points
    group by all
),

running as (
    select
        step_index, category, t,
        sum(delta) over (partition by step_index, category order by t rows unbounded preceding) as running_count
    from per_time
),

transitions as (
    select
        running.step_index, running.t, _category_codes.code,
        (running.running_count > 0)::integer
            - coalesce(lag((running.running_count > 0)::integer) over (partition by running.step_index, running.category order by running.t), 0)
            as change
    from running
    join _category_codes using (category)
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
        lead(t) over (partition by step_index order by t) as end_ns,
        sum(active_change) over (partition by step_index order by t rows unbounded preceding) as active_categories,
        sum(code_change) over (partition by step_index order by t rows unbounded preceding) as code_sum
    from per_point
)

select * from final where end_ns is not null and end_ns > start_ns and active_categories > 0
