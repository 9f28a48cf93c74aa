-- name: browse_step_timeline
-- A timeline strip of one step: its GPU span cut into $buckets equal slices, each labelled with the category
-- that ran longest in it (summed over streams), or, when nothing ran for at least half the slice, 'idle:' and the
-- cause of the idle time that covers most of it (host, sync, launch, device, unknown: gpu_gaps), plain 'idle' when
-- no gap is recorded there.
-- reads: gpu_events, gpu_gaps
-- params: $trace_id, $step_index, $start_ns, $end_ns, $buckets
-- grain: one row per slice (0 … $buckets - 1)
with slices as (
    select
        slice,
        $start_ns + (($end_ns - $start_ns) * slice) // $buckets as slice_start_ns,
        $start_ns + (($end_ns - $start_ns) * (slice + 1)) // $buckets as slice_end_ns
    from range($buckets) as t(slice)
),

step_events as (
    select start_ns, end_ns, coalesce(category, 'other') as category
    from gpu_events
    where trace_id = $trace_id
        and start_ns between $start_ns and $end_ns
        and step_index = $step_index
),

covered as (
    select
        slices.slice,
        step_events.category,
        sum(least(step_events.end_ns, slices.slice_end_ns) - greatest(step_events.start_ns, slices.slice_start_ns)) as ran_ns
    from slices
    join step_events
        on step_events.start_ns < slices.slice_end_ns and step_events.end_ns > slices.slice_start_ns
    group by all
),

dominant as (
    select slice, arg_max(category, ran_ns) as category, max(ran_ns) as ran_ns
    from covered
    group by slice
),

gap_parts as (  -- each gap cut where its launch call started: before it its cause, after it 'launch'
    select start_ns, start_ns + host_ns + sync_ns + device_ns + unknown_ns as end_ns, cause
    from gpu_gaps
    where trace_id = $trace_id and step_index = $step_index and not between_steps
    union all
    select start_ns + host_ns + sync_ns, end_ns, 'launch'
    from gpu_gaps
    where trace_id = $trace_id and step_index = $step_index and not between_steps and launch_ns > 0
),

idle_cause as (
    select slices.slice,
        arg_max(gap_parts.cause, least(gap_parts.end_ns, slices.slice_end_ns)
            - greatest(gap_parts.start_ns, slices.slice_start_ns)) as cause
    from slices
    join gap_parts on gap_parts.start_ns < slices.slice_end_ns and gap_parts.end_ns > slices.slice_start_ns
    group by slices.slice
)

select
    slices.slice,
    case
        when dominant.ran_ns is null or dominant.ran_ns * 2 < greatest(slices.slice_end_ns - slices.slice_start_ns, 1)
            then coalesce('idle:' || idle_cause.cause, 'idle')
        else dominant.category
    end as category
from slices
left join dominant using (slice)
left join idle_cause using (slice)
order by slices.slice
