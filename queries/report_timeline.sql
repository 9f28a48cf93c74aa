-- name: report_timeline
-- The whole GPU timeline of each step, accounted for: the CPU time of its marker, its GPU wall (first to last
-- activity) = busy + idle, the idle split by cause (host-bound, after a host sync, launch overhead,
-- device-bound dependency, unknown: queries/gaps_build.sql), the gap before it (GPU idle between the previous step
-- and this one: its idle split into host side (host + sync + launch) and device side (device + unknown);
-- between_busy = GPU work between the two steps that belongs to neither), the
-- launch overhead per gap (p50 / max µs), and a flag when one gap or one copy dominates the step.
-- reads: selected_steps (macro), step_idle, gpu_gaps, gpu_events, trace_runs
-- params: $phase, $rank, $trace_id, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per non-empty step of the selected traces
with selected as (
    -- every phase here: the gap before a step is measured from the previous step whatever its phase
    select steps.*, trace_runs.run_id,
        lag(steps.gpu_end_ns) over (partition by steps.trace_id order by steps.gpu_start_ns, steps.step_index) as prev_end_ns
    from selected_steps('all', $rank, $trace_id, of_run_id := $run_id) as steps  -- any batch size, as any phase
    left join trace_runs using (trace_id)
),

chosen as (
    select trace_id, step_index
    from selected_steps($phase, $rank, $trace_id, of_batch_size := $batch_size, of_run_id := $run_id)
),

gap_sums as (
    select trace_id, step_index, host_ns, sync_ns, launch_ns, device_ns, unknown_ns, longest_gap_ns, launch_p50_ns,
        launch_max_ns, gaps, between_idle_ns, between_host_ns + between_sync_ns + between_launch_ns as between_host_ns,
        between_device_ns + between_unknown_ns as between_device_ns
    from step_idle
    semi join chosen using (trace_id, step_index)
),

longest_copy as (
    select gpu_events.trace_id, gpu_events.step_index, max(gpu_events.dur_ns) as copy_ns
    from gpu_events
    join selected using (trace_id, step_index)
    where gpu_events.kind = 'memcpy'
    group by all
),

longest_gap as (
    -- the cause of the longest gap, only where it flags the step (ties: the first); found apart from gap_sums, as
    -- a struct-keyed arg_max over every gap cost a third of this query
    select gpu_gaps.trace_id, gpu_gaps.step_index, arg_max(gpu_gaps.cause, -gpu_gaps.start_ns) as cause
    from gpu_gaps
    join gap_sums using (trace_id, step_index)
    join selected using (trace_id, step_index)
    where not gpu_gaps.between_steps and gpu_gaps.dur_ns = gap_sums.longest_gap_ns
        and gap_sums.longest_gap_ns > 0.5 * selected.wall_ns
    group by all
),

rows as (
    select
        selected.*,
        coalesce(gap_sums.host_ns, 0) as host_ns,
        coalesce(gap_sums.sync_ns, 0) as sync_ns,
        coalesce(gap_sums.launch_ns, 0) as launch_ns,
        coalesce(gap_sums.device_ns, 0) as device_ns,
        coalesce(gap_sums.unknown_ns, 0) as unknown_ns,
        coalesce(gap_sums.gaps, 0) as gaps,
        gap_sums.longest_gap_ns, longest_gap.cause as longest_gap_cause, gap_sums.launch_p50_ns, gap_sums.launch_max_ns,
        case when selected.prev_end_ns is null then null else greatest(selected.gpu_start_ns - selected.prev_end_ns, 0) end
            as gap_before_ns,
        coalesce(gap_sums.between_idle_ns, 0) as between_idle_ns,
        coalesce(gap_sums.between_host_ns, 0) as between_host_ns,
        coalesce(gap_sums.between_device_ns, 0) as between_device_ns,
        longest_copy.copy_ns
    from selected
    semi join chosen using (trace_id, step_index)
    left join gap_sums using (trace_id, step_index)
    left join longest_gap using (trace_id, step_index)
    left join longest_copy using (trace_id, step_index)
)

select
    run_id, trace_id, rank, step_index, phase, batch_size,
    round((marker_end_ns - marker_start_ns) / 1e6, 4) as cpu_ms,
    round(wall_ns / 1e6, 4) as wall_ms,
    round(busy_ns / 1e6, 4) as busy_ms,
    round(idle_ns / 1e6, 4) as idle_ms,
    round(host_ns / 1e6, 4) as host_ms,
    round(sync_ns / 1e6, 4) as sync_ms,
    round(launch_ns / 1e6, 4) as launch_ms,
    round(device_ns / 1e6, 4) as device_ms,
    round(unknown_ns / 1e6, 4) as unknown_ms,
    gaps,
    round(launch_p50_ns / 1e3, 2) as launch_p50_us,
    round(launch_max_ns / 1e3, 2) as launch_max_us,
    round(gap_before_ns / 1e6, 4) as gap_before_ms,
    round(between_idle_ns / 1e6, 4) as between_idle_ms,
    round(between_host_ns / 1e6, 4) as between_host_ms,
    round(between_device_ns / 1e6, 4) as between_device_ms,
    round((gap_before_ns - between_idle_ns) / 1e6, 4) as between_busy_ms,
    case
        when copy_ns > 0.5 * wall_ns then 'one copy is ' || round(copy_ns * 100.0 / wall_ns)::int || ' % of the step ('
            || round(copy_ns / 1e6, 3) || ' ms)'
        when longest_gap_ns > 0.5 * wall_ns then 'one ' || longest_gap_cause || ' gap is '
            || round(longest_gap_ns * 100.0 / wall_ns)::int || ' % of the step (' || round(longest_gap_ns / 1e6, 3) || ' ms)'
    end as flag
from rows
order by run_id, trace_id, step_index
