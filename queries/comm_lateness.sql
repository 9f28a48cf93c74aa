-- name: comm_lateness
-- Why the late rank was late: for every paired collective with a late rank, its lateness (aligned start minus the
-- earliest rank's) split by what the late rank and the earliest (on-time) rank did since the previous paired
-- collective. Each rank's interval runs from the end of the previous paired collective (the same collective on
-- every rank) to the start of this one, on its own clock; it is cut into GPU busy time and the idle gaps in it
-- (gpu_gaps, gaps_build.sql: host-bound, launch overhead, after a host sync, device-bound, unknown; a gap lies in
-- one interval whole, as the collectives bounding it are GPU activity). busy = interval - idle.
-- The raw differences (late rank's part minus the on-time rank's: *_diff_ns) add up, with edge_ns (the previous
-- collective's aligned end on the late rank minus the on-time rank's: clock alignment), to the lateness exactly.
-- The parts (host_ns, launch_ns, sync_ns, device_ns, gpu_ns, other_ns) are the positive differences, scaled down
-- to the lateness when they exceed it (the on-time rank's own extra time in other kinds made up for part of
-- them): part = floor(lateness x diff / sum of positive diffs), the rounding remainder added to the largest part;
-- when the positive differences fall short of the lateness, the rest is other_ns. They add up to lateness_ns
-- exactly. A collective with no earlier paired collective on the ranks (the run's first) is all other_ns.
-- cause = the largest part; longer_work names the kernel categories that ran longer on the late rank in its
-- interval than on the on-time rank (kernel time started in the interval, clipped to it; longest first, those of
-- at least 10 % of the positive total), longer_kernel the single kernel (short name) that ran longest beyond.
-- creates: collective_causes (table)
-- reads: collectives, gpu_gaps, gpu_events, kernel_names, steps
-- params: none
-- grain: one row per paired collective with a late rank whose lateness is > 0
create or replace table collective_causes as
with ordered as (  -- each rank's paired collectives in time order, with the previous one
    select run_id, pair_step, step_index, category, ordinal, step_ordinal, trace_id, rank, start_ns, end_ns,
        aligned_start_ns, offset_ns, lateness_ns, is_late,
        lag(end_ns) over w as prev_end_ns,
        lag(aligned_end_ns) over w as prev_aligned_end_ns,
        lag(pair_step::varchar || '/' || category || '/' || ordinal::varchar) over w as prev_key
    from collectives
    window w as (partition by trace_id order by start_ns, end_ns)
),

keyed as (  -- the interval counts only when every rank's previous collective is the same one
    select *,
        count(distinct coalesce(prev_key, '')) over c = 1 and bool_and(prev_key is not null) over c as has_prev,
        row_number() over (partition by run_id, pair_step, category, ordinal order by aligned_start_ns, rank) = 1
            as is_first
    from ordered
    window c as (partition by run_id, pair_step, category, ordinal)
),

pairs as (
    select late.run_id, late.pair_step, late.step_index, late.category, late.ordinal, late.step_ordinal,
        late.trace_id, late.rank, early.trace_id as early_trace_id, early.rank as early_rank,
        late.lateness_ns, late.has_prev,
        late.prev_end_ns as late_from_ns, late.start_ns as late_to_ns,
        early.prev_end_ns as early_from_ns, early.start_ns as early_to_ns,
        late.prev_aligned_end_ns - early.prev_aligned_end_ns as edge_ns
    from keyed as late
    join keyed as early using (run_id, pair_step, category, ordinal)
    where late.is_late and early.is_first and late.lateness_ns > 0
),

intervals as (  -- one row per (collective, side) with the rank's interval
    select run_id, pair_step, category, ordinal, 'late' as side, trace_id, late_from_ns as from_ns, late_to_ns as to_ns
    from pairs where has_prev
    union all
    select run_id, pair_step, category, ordinal, 'early', early_trace_id, early_from_ns, early_to_ns
    from pairs where has_prev
),

gaps as (
    select trace_id, start_ns, end_ns, host_ns, sync_ns, launch_ns, device_ns + unknown_ns as device_ns
    from gpu_gaps
    where trace_id in (select trace_id from intervals)
),

gap_in as (  -- the interval (of this trace) that started last at or before the gap holds it
    select intervals.run_id, intervals.pair_step, intervals.category, intervals.ordinal, intervals.side,
        sum(gaps.host_ns) as host_ns, sum(gaps.sync_ns) as sync_ns, sum(gaps.launch_ns) as launch_ns,
        sum(gaps.device_ns) as device_ns
    from gaps
    asof join intervals on gaps.trace_id = intervals.trace_id and gaps.start_ns >= intervals.from_ns
    where gaps.end_ns <= intervals.to_ns
    group by all
),

composed as (
    select intervals.*, intervals.to_ns - intervals.from_ns as span_ns,
        coalesce(gap_in.host_ns, 0) as host_ns, coalesce(gap_in.sync_ns, 0) as sync_ns,
        coalesce(gap_in.launch_ns, 0) as launch_ns, coalesce(gap_in.device_ns, 0) as device_ns
    from intervals
    left join gap_in using (run_id, pair_step, category, ordinal, side)
),

sides as (
    select run_id, pair_step, category, ordinal,
        sum(case when side = 'late' then host_ns else -host_ns end) as host_diff_ns,
        sum(case when side = 'late' then launch_ns else -launch_ns end) as launch_diff_ns,
        sum(case when side = 'late' then sync_ns else -sync_ns end) as sync_diff_ns,
        sum(case when side = 'late' then device_ns else -device_ns end) as device_diff_ns,
        sum(case when side = 'late' then 1 else -1 end * (span_ns - host_ns - sync_ns - launch_ns - device_ns))
            as gpu_diff_ns,
        sum(span_ns) filter (where side = 'late') as late_span_ns,
        sum(span_ns) filter (where side = 'early') as early_span_ns
    from composed
    group by all
),

work as (  -- kernel time per category started in each interval, clipped to it
    select intervals.run_id, intervals.pair_step, intervals.category, intervals.ordinal, intervals.side,
        coalesce(gpu_events.category, 'other') as work_category, gpu_events.name_id,
        sum(least(gpu_events.end_ns, intervals.to_ns) - gpu_events.start_ns) as ns
    from gpu_events
    asof join intervals on gpu_events.trace_id = intervals.trace_id and gpu_events.start_ns >= intervals.from_ns
    where gpu_events.trace_id in (select trace_id from intervals) and gpu_events.start_ns < intervals.to_ns
    group by all
),

work_diff as (
    select run_id, pair_step, category, ordinal, work_category, name_id,
        sum(case when side = 'late' then ns else -ns end) as diff_ns
    from work
    group by all
),

category_diff as (
    select run_id, pair_step, category, ordinal, work_category, sum(diff_ns) as diff_ns
    from work_diff
    group by all
),

longer as (
    select run_id, pair_step, category, ordinal,
        string_agg(work_category, ', ' order by diff_ns desc, work_category) filter (
            where diff_ns > 0 and diff_ns * 10 >= positive_ns) as longer_work
    from (select *, sum(greatest(diff_ns, 0)) over (partition by run_id, pair_step, category, ordinal) as positive_ns
          from category_diff)
    group by all
),

longest_kernel as (
    select run_id, pair_step, category, ordinal, arg_max(kernel_names.short_name, diff_ns) as longer_kernel
    from work_diff
    join kernel_names using (name_id)
    where diff_ns > 0
    group by all
),

diffs as (
    select pairs.*, sides.* exclude (run_id, pair_step, category, ordinal),
        pairs.lateness_ns - coalesce(sides.host_diff_ns + sides.launch_diff_ns + sides.sync_diff_ns
            + sides.device_diff_ns + sides.gpu_diff_ns, 0) as rest_ns
    from pairs
    left join sides using (run_id, pair_step, category, ordinal)
),

positive as (
    select *,
        greatest(coalesce(host_diff_ns, 0), 0) as p_host, greatest(coalesce(launch_diff_ns, 0), 0) as p_launch,
        greatest(coalesce(sync_diff_ns, 0), 0) as p_sync, greatest(coalesce(device_diff_ns, 0), 0) as p_device,
        greatest(coalesce(gpu_diff_ns, 0), 0) as p_gpu
    from diffs
),

scaled as (
    select *,
        p_host + p_launch + p_sync + p_device + p_gpu as p_total,
        case when p_host + p_launch + p_sync + p_device + p_gpu > lateness_ns
            then lateness_ns::hugeint * p_host // (p_host + p_launch + p_sync + p_device + p_gpu) else p_host end as s_host,
        case when p_host + p_launch + p_sync + p_device + p_gpu > lateness_ns
            then lateness_ns::hugeint * p_launch // (p_host + p_launch + p_sync + p_device + p_gpu) else p_launch end as s_launch,
        case when p_host + p_launch + p_sync + p_device + p_gpu > lateness_ns
            then lateness_ns::hugeint * p_sync // (p_host + p_launch + p_sync + p_device + p_gpu) else p_sync end as s_sync,
        case when p_host + p_launch + p_sync + p_device + p_gpu > lateness_ns
            then lateness_ns::hugeint * p_device // (p_host + p_launch + p_sync + p_device + p_gpu) else p_device end as s_device,
        case when p_host + p_launch + p_sync + p_device + p_gpu > lateness_ns
            then lateness_ns::hugeint * p_gpu // (p_host + p_launch + p_sync + p_device + p_gpu) else p_gpu end as s_gpu
    from positive
),

largest as (  -- the largest part (ties: host, launch, sync, device, gpu) takes the rounding remainder
    select *,
        case when p_total <= lateness_ns then 'other'
             when s_host >= greatest(s_launch, s_sync, s_device, s_gpu) then 'host'
             when s_launch >= greatest(s_sync, s_device, s_gpu) then 'launch'
             when s_sync >= greatest(s_device, s_gpu) then 'sync'
             when s_device >= s_gpu then 'device'
             else 'gpu' end as remainder_to,
        lateness_ns - (s_host + s_launch + s_sync + s_device + s_gpu) as remainder_ns
    from scaled
),

parts as (
    select *,
        (s_host + case when remainder_to = 'host' then remainder_ns else 0 end)::bigint as host_ns,
        (s_launch + case when remainder_to = 'launch' then remainder_ns else 0 end)::bigint as launch_ns,
        (s_sync + case when remainder_to = 'sync' then remainder_ns else 0 end)::bigint as sync_ns,
        (s_device + case when remainder_to = 'device' then remainder_ns else 0 end)::bigint as device_ns,
        (s_gpu + case when remainder_to = 'gpu' then remainder_ns else 0 end)::bigint as gpu_ns,
        (case when remainder_to = 'other' then remainder_ns else 0 end)::bigint as other_ns
    from largest
)

select
    parts.run_id, parts.step_index, parts.pair_step, parts.category, parts.ordinal, parts.step_ordinal,
    parts.trace_id, parts.rank, parts.early_trace_id, parts.early_rank,
    parts.lateness_ns,
    parts.host_ns, parts.launch_ns, parts.sync_ns, parts.device_ns, parts.gpu_ns, parts.other_ns,
    case when not parts.has_prev then 'unknown'
         when greatest(parts.host_ns, parts.launch_ns) >= greatest(parts.sync_ns, parts.device_ns, parts.gpu_ns,
                                                                   parts.other_ns)
             then case when parts.host_ns >= parts.launch_ns then 'host' else 'launch' end
         when parts.sync_ns >= greatest(parts.device_ns, parts.gpu_ns, parts.other_ns) then 'sync'
         when parts.gpu_ns >= greatest(parts.device_ns, parts.other_ns) then 'gpu'
         when parts.device_ns >= parts.other_ns then 'device'
         else 'other' end as cause,
    case when parts.gpu_ns > 0 then longer.longer_work end as longer_work,
    case when parts.gpu_ns > 0 then longest_kernel.longer_kernel end as longer_kernel,
    parts.has_prev as has_interval,
    parts.late_from_ns, parts.early_from_ns,
    parts.late_span_ns, parts.early_span_ns,
    parts.host_diff_ns, parts.launch_diff_ns, parts.sync_diff_ns, parts.device_diff_ns, parts.gpu_diff_ns,
    parts.rest_ns as edge_ns
from parts
left join longer using (run_id, pair_step, category, ordinal)
left join longest_kernel using (run_id, pair_step, category, ordinal)
order by parts.run_id, parts.pair_step, parts.step_ordinal
