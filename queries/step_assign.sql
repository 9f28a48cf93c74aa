-- name: step_assign
-- Assign each GPU activity of one trace to its engine step by its launch: correlation -> the runtime/driver
-- call with that correlation (for CUDA-graph kernels the cudaGraphLaunch they share) -> the latest step marker
-- that started at or before the launch. Steps from GPU annotations or inferred from gaps match on GPU start.
-- Every activity of the trace is unassigned first (a rebuild may find fewer or other steps).
-- creates: gpu_events.step_index (reset, then updated for one trace)
-- reads: _step_markers, gpu_events, launches
-- params: $trace_id
-- grain: one row per GPU activity of the trace (update)
update gpu_events
set step_index = null
where trace_id = $trace_id and step_index is not null;

update gpu_events
set step_index = assigned.step_index
from (
    with launch_times as (
        select correlation, min(start_ns) as launch_ns
        from launches
        where trace_id = $trace_id and correlation is not null
        group by correlation
    ),

    activity as (
        select
            gpu_events.event_id,
            case when (select any_value(match_on) from _step_markers) = 'launch'
                 then coalesce(launch_times.launch_ns, gpu_events.start_ns) else gpu_events.start_ns end as anchor_ns
        from gpu_events
        left join launch_times using (correlation)
        where gpu_events.trace_id = $trace_id
    ),

    matched as (
        select activity.event_id, _step_markers.step_index, _step_markers.window_end_ns, activity.anchor_ns
        from activity
        asof join _step_markers on activity.anchor_ns >= _step_markers.window_start_ns
    )

    select event_id, step_index from matched where anchor_ns < window_end_ns
) as assigned
where gpu_events.trace_id = $trace_id
    and gpu_events.event_id = assigned.event_id
