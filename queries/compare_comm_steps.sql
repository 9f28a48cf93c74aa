-- name: compare_comm_steps
-- One side of `k25trace compare`: per selected step of a multi-rank run and collective category, the paired
-- collectives' time split as in `report --by comm`: transfer (the shortest duration across ranks, summed over the
-- step's collectives) and wait (each collective's mean wait over ranks, summed; launch wait at the step's first
-- collective, gpu wait at later ones). Steps of runs paired over the whole trace (no step markers) are left out.
-- reads: collectives, steps, traces, trace_runs
-- params: $phase, $run_id, $level, $trace_ids, $batch_size
-- grain: one row per (run_id, step_index, category) with paired collectives
with selected_steps as (
    select distinct trace_runs.run_id, steps.step_index
    from steps
    join traces using (trace_id)
    join trace_runs using (trace_id)
    where not steps.is_empty
        and not traces.is_frontend
        and ($phase = 'all' or steps.phase = $phase)
        and ($run_id is null or trace_runs.run_id = $run_id)
        and ($level is null or traces.level = $level)
        and ($trace_ids is null or list_contains($trace_ids, steps.trace_id))
        and ($batch_size is null or steps.batch_size = $batch_size)
),

per_collective as (
    select
        collectives.run_id, collectives.step_index, collectives.category, collectives.ordinal,
        any_value(collectives.transfer_ns) as transfer_ns,
        avg(collectives.wait_ns) as mean_wait_ns,
        any_value(collectives.wait_kind) as wait_kind,
        count(*) as ranks
    from collectives
    join selected_steps using (run_id, step_index)
    where collectives.pair_step >= 0
    group by all
)

select
    run_id,
    step_index,
    category,
    count(*) as calls,
    max(ranks) as ranks,
    sum(transfer_ns)::bigint as transfer_ns,
    sum(mean_wait_ns) as wait_ns,
    coalesce(sum(mean_wait_ns) filter (where wait_kind = 'launch'), 0) as launch_wait_ns,
    coalesce(sum(mean_wait_ns) filter (where wait_kind = 'gpu'), 0) as gpu_wait_ns
from per_collective
group by all
order by all
