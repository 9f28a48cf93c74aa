-- name: gaps_build
-- Every GPU idle gap of one trace, classified. In-step gaps: between the step's own GPU activities (kernels,
-- copies, memsets; union over streams), so a step's gaps add up to its idle_ns exactly. Between-step gaps: holes
-- in the union of all the trace's GPU activity that lie in no step's window (first to last activity), from the
-- first step's start to the last step's end, attributed to the step that follows. Each gap is explained by the
-- GPU activity that ends it and that activity's launch call (correlation; graph kernels share their
-- cudaGraphLaunch's):
--   device: the launch call started before the GPU went idle: the GPU waited on a dependency (another stream, an
--           event, a graph's internal edges), not on the host;
--   sync:   the launch came after the GPU went idle and a host synchronisation on the launching thread
--           (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, a synchronous cudaMemcpy, their
--           cu*/hip* forms, hipMemcpyWithStream) returned inside the gap: the host had waited for the GPU, then
--           had to relaunch; or the launch came after the GPU went idle and such a blocking call (on any
--           thread) covers at least half of the gap: the GPU waited behind a blocking copy (all of the gap is
--           then sync_ns; a blocking call while the GPU runs queued work explains nothing and is ignored);
--   host:   the launch came after the GPU went idle with no such sync: the CPU was late (Python, scheduling);
--   unknown: no launch call found for the activity.
-- host and sync gaps split at the launch call's start: before it host_ns / sync_ns (the GPU waits for the host to
-- issue the launch), after it launch_ns (the launch path itself: call start -> GPU start, launch overhead).
-- A gap after a sync on the launching thread splits again where that sync returned (sync_end_ns, host clock):
-- gap start -> sync return is sync_ns, sync return -> launch call is host_ns (the host was free and still late);
-- its cause is the larger of the two (ties: sync). Behind a blocking call the whole gap up to the GPU start is sync.
-- host_ns + sync_ns + launch_ns + device_ns + unknown_ns = dur_ns for every gap.
-- creates: gpu_gaps (rows for one trace)
-- reads: gpu_events, launches, steps, traces
-- params: $trace_id
-- grain: one row per idle gap of the trace's GPU timeline
delete from gpu_gaps where trace_id = $trace_id;

insert into gpu_gaps by name
with acts as (
    select event_id, step_index, start_ns, end_ns, correlation
    from gpu_events
    where trace_id = $trace_id
),

in_step as (  -- the latest end among the step's earlier activities (NULL for its first): one ordered pass over
              -- all steps, the max of (step, end) pairs packed into one HUGEINT (step * 2^64 + end + 2^63; steps
              -- count from 0), unpacked where the pair is this step's; 2.4x faster than the partitioned window
    select step_index, event_id, start_ns, correlation,
        case when (packed >> 64) = step_index
            then ((packed & 18446744073709551615) - 9223372036854775808)::bigint end as prev_end_ns
    from (
        select step_index, event_id, start_ns, correlation,
            max(step_index * 18446744073709551616::hugeint + end_ns + 9223372036854775808::hugeint)
                over (order by step_index, start_ns, end_ns, event_id
                      rows between unbounded preceding and 1 preceding) as packed
        from acts
        where step_index is not null
    )
),

in_step_gaps as (
    select step_index, false as between_steps, prev_end_ns as start_ns, start_ns as end_ns,
        event_id as next_event_id, correlation
    from in_step
    where start_ns > prev_end_ns
),

windows as (
    select step_index, gpu_start_ns, gpu_end_ns
    from steps
    where trace_id = $trace_id and gpu_start_ns is not null
),

span as (
    select min(gpu_start_ns) as first_ns, max(gpu_end_ns) as last_ns from windows
),

everything as (
    select event_id, start_ns, correlation,
        max(end_ns) over (order by start_ns, end_ns, event_id rows between unbounded preceding and 1 preceding) as prev_end_ns
    from acts
),

global_gaps as (
    select prev_end_ns as start_ns, start_ns as end_ns, event_id as next_event_id, correlation
    from everything, span
    where start_ns > prev_end_ns and prev_end_ns >= span.first_ns and start_ns <= span.last_ns
),

containing as (  -- the latest step window that started at or before the gap: the gap is inside it when it ends by its end
    select global_gaps.*, windows.gpu_end_ns as window_end_ns
    from global_gaps
    asof left join windows on global_gaps.start_ns >= windows.gpu_start_ns
),

between_gaps as (
    select following.step_index, true as between_steps, containing.start_ns, containing.end_ns,
        containing.next_event_id, containing.correlation
    from containing
    asof left join windows as following on containing.end_ns <= following.gpu_start_ns
    where containing.window_end_ns is null or containing.end_ns > containing.window_end_ns
),

gaps as (
    select * from in_step_gaps
    union all
    select * from between_gaps
),

calls as (  -- one launch call per correlation id (of the activities that end a gap)
    select correlation, arg_min(name, start_ns) as name, min(start_ns) as start_ns, arg_min(tid, start_ns) as tid
    from launches
    where trace_id = $trace_id and correlation in (select correlation from gaps)
    group by correlation
),

syncs as (
    select tid, start_ns, end_ns
    from launches
    where trace_id = $trace_id
        and name in ('cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaEventSynchronize', 'cudaMemcpy',
                     'cudaMemcpy2D', 'cuStreamSynchronize', 'cuCtxSynchronize', 'cuEventSynchronize', 'cuMemcpyDtoH_v2',
                     'cuMemcpyHtoD_v2', 'hipStreamSynchronize', 'hipDeviceSynchronize', 'hipEventSynchronize',
                     'hipMemcpy', 'hipMemcpyWithStream')
),

launched as (
    select gaps.*, calls.name as launch_name, calls.start_ns as launch_start_ns, calls.tid
    from gaps
    left join calls using (correlation)
),

synced as (
    select launched.*, syncs.end_ns as sync_end_ns
    from launched
    asof left join syncs on syncs.tid = launched.tid and launched.launch_start_ns >= syncs.end_ns
),

sync_islands as (  -- each thread's blocking calls, with the calls nested in another (cudaMemcpy around its
                   -- cuMemcpyDtoH_v2) merged into it; a NULL thread is one thread
    select thread, min(start_ns) as start_ns, max(end_ns) as end_ns
    from (
        select *, sum(opens::integer) over (partition by thread order by start_ns, end_ns desc rows unbounded preceding)
            as island
        from (
            select thread, start_ns, end_ns,
                coalesce(start_ns >= max(end_ns) over (partition by thread order by start_ns, end_ns desc
                                                       rows between unbounded preceding and 1 preceding), true) as opens
            from (select coalesce(tid, -9223372036854775808) as thread, start_ns, end_ns from syncs)
        )
    )
    group by thread, island
),

blocked as (  -- gaps at least half covered by one blocking call (a long blocking copy or sync). Such a call covers
              -- the gap's midpoint, so on each thread only the island that starts last at or before it can be one
    select candidates.start_ns, candidates.next_event_id, max(sync_islands.end_ns) as blocking_end_ns
    from (select gaps.start_ns, gaps.end_ns, gaps.next_event_id, threads.thread
          from gaps cross join (select distinct thread from sync_islands) as threads) as candidates
    asof join sync_islands on sync_islands.thread = candidates.thread
        and candidates.start_ns + candidates.end_ns >= 2 * sync_islands.start_ns
    where 2 * (least(sync_islands.end_ns, candidates.end_ns) - greatest(sync_islands.start_ns, candidates.start_ns))
        >= candidates.end_ns - candidates.start_ns
    group by all
),

classified as (
    select synced.* replace (coalesce(blocked.blocking_end_ns, synced.sync_end_ns) as sync_end_ns),
        blocked.blocking_end_ns is not null and coalesce(launch_start_ns > synced.start_ns, true) as behind_blocking
    from synced
    left join blocked using (start_ns, next_event_id)
),

cut as (
    select *,
        case
            when behind_blocking then 'sync'
            when launch_start_ns is null then 'unknown'
            when launch_start_ns <= start_ns then 'device'
            when sync_end_ns is not null and sync_end_ns >= start_ns then 'after_sync'
            else 'host'
        end as kind,
        case when behind_blocking then end_ns
            else least(greatest(coalesce(launch_start_ns, start_ns), start_ns), end_ns)
        end as launch_cut_ns
    from classified
),

decided as (  -- after a sync the gap splits where the sync returned: sync before, host-bound after (the host was
              -- free then and still took that long to launch); the gap is called by the larger of the two
    select * exclude (kind),
        case when kind = 'after_sync' then least(sync_end_ns, launch_cut_ns)
             when kind = 'sync' then launch_cut_ns else start_ns end as sync_cut_ns,
        case when kind != 'after_sync' then kind
             when least(sync_end_ns, launch_cut_ns) - start_ns >= launch_cut_ns - least(sync_end_ns, launch_cut_ns)
                 then 'sync'
             else 'host' end as cause,
        kind in ('host', 'sync', 'after_sync') as launched_late
    from cut
)

select
    $trace_id as trace_id,
    (select rank from traces where trace_id = $trace_id) as rank,
    step_index,
    between_steps,
    start_ns,
    end_ns,
    end_ns - start_ns as dur_ns,
    cause,
    case when launched_late then launch_cut_ns - sync_cut_ns else 0 end as host_ns,
    case when launched_late then sync_cut_ns - start_ns else 0 end as sync_ns,
    case when launched_late then end_ns - launch_cut_ns else 0 end as launch_ns,
    case when cause = 'device' then end_ns - start_ns else 0 end as device_ns,
    case when cause = 'unknown' then end_ns - start_ns else 0 end as unknown_ns,
    next_event_id,
    launch_name,
    launch_start_ns,
    sync_end_ns
from decided;
