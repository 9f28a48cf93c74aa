-- name: summary
-- What the database holds: per trace its rank, device, events, GPU activities, steps by phase and the batch
-- sizes of its decode steps.
-- reads: traces, steps
-- params: none
-- grain: one row per loaded trace
with step_counts as (
    select
        trace_id,
        count(*) as steps,
        count(*) filter (where phase = 'decode') as decode_steps,
        count(*) filter (where phase = 'prefill') as prefill_steps,
        count(*) filter (where phase = 'mixed') as mixed_steps,
        count(*) filter (where is_empty) as empty_steps,
        bool_or(is_inferred) as inferred,
        string_agg(distinct batch_size::varchar, ',' order by batch_size::varchar) filter (where phase = 'decode') as decode_batch_sizes
    from steps
    group by trace_id
)

select
    traces.trace_id,
    traces.file_name,
    traces.rank,
    traces.world_size,
    traces.device_name,
    traces.level,
    traces.event_count,
    traces.gpu_event_count,
    coalesce(step_counts.steps, 0) as steps,
    coalesce(step_counts.decode_steps, 0) as decode,
    coalesce(step_counts.prefill_steps, 0) as prefill,
    coalesce(step_counts.mixed_steps, 0) as mixed,
    coalesce(step_counts.empty_steps, 0) as empty,
    coalesce(step_counts.inferred, false) as inferred,
    step_counts.decode_batch_sizes
from traces
left join step_counts using (trace_id)
order by traces.trace_id
