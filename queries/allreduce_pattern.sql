-- name: allreduce_pattern
-- The all-reduce pattern of the loaded steps, per batch size: how many all-reduces a step runs (median over
-- steps and ranks), and their message size in bytes where the trace records the collective's arguments
-- (In msg nelems x the element size of its dtype; the most common size of the batch size's all-reduces), else
-- NULL (the bench then assumes hidden x batch x dtype). `k25trace bench allreduce --db` reads it.
-- reads: steps, gpu_events, traces
-- params: $phase
-- grain: one row per batch_size
with selected as (
    select steps.trace_id, steps.step_index, steps.batch_size
    from steps
    where not steps.is_empty and ($phase = 'all' or steps.phase = $phase) and steps.batch_size is not null
),

per_step as (
    select selected.batch_size, selected.trace_id, selected.step_index, count(gpu_events.event_id) as calls
    from selected
    left join gpu_events
        on gpu_events.trace_id = selected.trace_id
        and gpu_events.step_index = selected.step_index
        and gpu_events.category = 'allreduce'
    group by all
),

sized as (
    select
        selected.batch_size,
        gpu_events.msg_dtype,
        gpu_events.msg_in_nelems * case lower(gpu_events.msg_dtype)
            when 'bfloat16' then 2 when 'half' then 2 when 'float16' then 2
            when 'float' then 4 when 'float32' then 4 when 'int' then 4 when 'int32' then 4
            when 'double' then 8 when 'float64' then 8 when 'long' then 8 when 'int64' then 8
            when 'byte' then 1 when 'char' then 1 when 'uint8' then 1 when 'int8' then 1
            else case when lower(gpu_events.msg_dtype) like 'float8%' then 1 end
        end as size_bytes
    from gpu_events
    join selected using (trace_id, step_index)
    where gpu_events.category = 'allreduce' and gpu_events.msg_in_nelems is not null
),

sizes as (
    select batch_size, size_bytes, any_value(msg_dtype) as msg_dtype, count(*) as n
    from sized
    where size_bytes is not null
    group by all
)

select
    per_step.batch_size,
    count(*) as steps,
    (select max(traces.world_size) from traces where traces.trace_id in (select trace_id from selected)) as world_size,
    round(median(per_step.calls))::integer as allreduce_per_step,
    (select arg_max(sizes.size_bytes, sizes.n) from sizes where sizes.batch_size = per_step.batch_size) as size_bytes,
    (select arg_max(sizes.msg_dtype, sizes.n) from sizes where sizes.batch_size = per_step.batch_size) as msg_dtype
from per_step
group by per_step.batch_size
order by per_step.batch_size
