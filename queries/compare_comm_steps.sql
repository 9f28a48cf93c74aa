-- name: compare_comm_steps
-- One side of `k25trace compare`: per selected step of a multi-rank run and collective category, the paired
-- collectives' time split as in `report --by comm`: transfer (the shortest duration across ranks, summed over the
-- step's collectives) and wait (each collective's mean wait over ranks, summed; launch_wait_ns: the wait at the
-- step's first collective, gpu_wait_ns: at later ones, compare's "wait at 1st" and "wait at later"). Steps of runs
-- paired over the whole trace (no step markers) are left out.
-- reads: _compare_selection, collectives
-- params: none
-- grain: one row per (run_id, step_index, category) with paired collectives
with selected_steps as (  -- run only for sides without a rank filter: every rank of a step
    select distinct run_id, step_index from _compare_selection
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
