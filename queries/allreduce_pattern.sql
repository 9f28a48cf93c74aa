-- name: allreduce_pattern
-- The all-reduce pattern of the loaded steps, per batch size: how many all-reduces a step runs (median over
-- steps and ranks), and their message size in bytes where the trace records the collective's arguments
-- (In msg nelems x the element size of its dtype; the most common size of the batch size's all-reduces), else
-- NULL (the bench then assumes hidden x batch x dtype). `k25trace bench allreduce --db` reads it.
-- reads: selected_steps (macro), gpu_events, traces, dtype_bytes (macro)
-- params: $phase
-- grain: one row per batch_size
with selected as (
    select steps.trace_id, steps.step_index, steps.batch_size
    from selected_steps($phase, null, null) as steps
    where steps.batch_size is not null
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
        gpu_events.msg_in_nelems * dtype_bytes(gpu_events.msg_dtype) as size_bytes
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
