-- name: collectives
-- Pair the collectives of all ranks of a run and split their time into transfer and wait. Ranks of one run are
-- the traces of one capture level (or, outside captures, of one directory) with the same world size. Within a
-- step (same step_index on every rank: markers are emitted identically), the k-th collective of a category on
-- each rank is the same collective. Rank clocks differ: each rank's offset is the median, over its paired
-- collectives, of how much later its kernels end than the reference rank's (collectives end nearly together).
-- After alignment: transfer = the shortest duration across ranks; wait = a rank's duration minus transfer; the
-- late rank is the one whose kernel started last (ties: the shortest duration); the wait of the other ranks is
-- charged to it (caused_wait_ns). lateness_ns = how much later than the earliest rank a rank arrived. A wait at
-- the first collective of a step (step_ordinal 0, any category) is 'launch' wait (the ranks' hosts started the
-- step at different times: a slow host thread, a late graph replay); a wait at a later collective is 'gpu'
-- wait (the work on the GPU between two collectives took longer on the late rank). Traces whose steps were
-- inferred (no markers) pair their collectives over the whole trace (pair_step = -1; wait_kind 'unknown').
-- creates: trace_runs (table), _collective_calls (temp table), rank_offsets (table), collectives (table)
-- reads: traces, gpu_events, steps
-- params: none
-- grain: trace_runs = one row per trace; rank_offsets = one row per trace in a multi-rank run; collectives = one row per paired collective per rank
create or replace table trace_runs as
select
    trace_id,
    rank,
    world_size,
    coalesce(capture_dir || '#' || coalesce(level, ''), regexp_replace(path, '/[^/]*$', '')) || '#ws' || coalesce(world_size::varchar, '?') as run_id
from traces
where not is_frontend;

create or replace temp table _collective_calls as
with trace_inferred as (
    select trace_id, bool_or(is_inferred) as inferred from steps group by trace_id
),

calls as (
    select
        trace_runs.run_id, gpu_events.trace_id, gpu_events.rank, gpu_events.event_id, gpu_events.step_index,
        -- steps inferred from idle gaps need not line up across ranks: pair such traces' collectives over the
        -- whole trace instead of per step
        case when coalesce(trace_inferred.inferred, true) then -1 else gpu_events.step_index end as pair_step,
        gpu_events.category, gpu_events.start_ns, gpu_events.end_ns, gpu_events.dur_ns
    from gpu_events
    join trace_runs using (trace_id)
    left join trace_inferred using (trace_id)
    where gpu_events.category in ('allreduce', 'comm_other')
        and (gpu_events.step_index is not null or coalesce(trace_inferred.inferred, true))
)

select
    *,
    row_number() over (partition by trace_id, pair_step, category order by start_ns, event_id) - 1 as ordinal,
    row_number() over (partition by trace_id, pair_step order by start_ns, event_id) - 1 as step_ordinal
from calls;

create or replace table rank_offsets as
with calls as (
    select * from _collective_calls
),

run_sizes as (
    select run_id, count(distinct rank) as ranks, min(rank) as reference_rank from trace_runs group by run_id having count(distinct rank) > 1
),

complete as (
    select calls.*
    from calls
    join run_sizes using (run_id)
    qualify count(distinct calls.rank) over (partition by calls.run_id, calls.pair_step, calls.category, calls.ordinal) = run_sizes.ranks
),

reference as (
    select complete.run_id, complete.pair_step, complete.category, complete.ordinal, complete.end_ns as reference_end_ns
    from complete
    join run_sizes using (run_id)
    where complete.rank = run_sizes.reference_rank
),

differences as (
    select complete.run_id, complete.trace_id, complete.rank, complete.end_ns - reference.reference_end_ns as end_difference_ns
    from complete
    join reference using (run_id, pair_step, category, ordinal)
)

select
    run_id,
    trace_id,
    rank,
    median(end_difference_ns)::bigint as offset_ns,
    count(*) as paired_collectives
from differences
group by all;

create or replace table collectives as
with calls as (
    select * from _collective_calls
),

aligned as (
    select
        calls.*,
        rank_offsets.offset_ns,
        calls.start_ns - rank_offsets.offset_ns as aligned_start_ns,
        calls.end_ns - rank_offsets.offset_ns as aligned_end_ns,
        count(*) over (partition by calls.run_id, calls.pair_step, calls.category, calls.ordinal) as ranks_present,
        (select count(distinct rank) from trace_runs where trace_runs.run_id = calls.run_id) as run_ranks
    from calls
    join rank_offsets using (run_id, trace_id)
),

paired as (
    select
        *,
        min(dur_ns) over collective as transfer_ns,
        max(aligned_start_ns) over collective - min(aligned_start_ns) over collective as skew_ns,
        aligned_end_ns - avg(aligned_end_ns) over collective as end_residual_ns,
        aligned_start_ns - min(aligned_start_ns) over collective as lateness_ns,
        -- the step's first collective on the reference (lowest) rank decides the wait kind for all ranks
        min(step_ordinal) over collective as first_step_ordinal,
        row_number() over (partition by run_id, pair_step, category, ordinal order by aligned_start_ns desc, dur_ns, rank) = 1 as is_late
    from aligned
    where ranks_present = run_ranks
    window collective as (partition by run_id, pair_step, category, ordinal)
),

waited as (
    select *, dur_ns - transfer_ns as wait_ns
    from paired
)

select
    run_id, step_index, pair_step, category, ordinal, step_ordinal, trace_id, rank, event_id,
    start_ns, end_ns, dur_ns, offset_ns, aligned_start_ns, aligned_end_ns,
    transfer_ns,
    wait_ns,
    is_late,
    skew_ns,
    end_residual_ns::bigint as end_residual_ns,
    lateness_ns,
    case when is_late then sum(wait_ns) over (partition by run_id, pair_step, category, ordinal) - wait_ns else 0 end
        as caused_wait_ns,
    case when pair_step < 0 then 'unknown' when first_step_ordinal = 0 then 'launch' else 'gpu' end as wait_kind
from waited
order by run_id, pair_step, category, ordinal, rank
