-- name: browse_step
-- One step's header: its trace and rank, phase, batch and token counts, GPU span and times, and the indexes of
-- the previous and next steps of the same trace (NULL at either end).
-- reads: steps, traces
-- params: $trace_id, $step_index
-- grain: one row (none when the step does not exist)
with neighbours as (
    select
        max(step_index) filter (where step_index < $step_index) as prev_step,
        min(step_index) filter (where step_index > $step_index) as next_step,
        count(*) as trace_steps
    from steps
    where trace_id = $trace_id
)

select
    steps.trace_id,
    steps.rank,
    traces.file_name,
    traces.level,
    steps.step_index,
    steps.phase,
    steps.batch_size,
    steps.ctx_reqs,
    steps.ctx_tokens,
    steps.gen_reqs,
    steps.gen_tokens,
    steps.is_empty,
    steps.is_inferred,
    steps.marker,
    steps.graph_launches,
    steps.gpu_start_ns,
    steps.gpu_end_ns,
    steps.wall_ns,
    steps.busy_ns,
    steps.idle_ns,
    steps.overlap_ns,
    steps.kernel_count,
    neighbours.prev_step,
    neighbours.next_step,
    neighbours.trace_steps
from steps
join traces using (trace_id)
cross join neighbours
where steps.trace_id = $trace_id and steps.step_index = $step_index
