-- name: step_assign
-- Assign each GPU activity of one trace to its engine step by its launch: correlation -> the runtime/driver
-- call with that correlation (for CUDA-graph kernels the cudaGraphLaunch they share) -> the latest step marker
-- that started at or before the launch. Steps from GPU annotations or inferred from gaps match on GPU start.
-- Every activity of the trace is unassigned first (a rebuild may find fewer or other steps).
-- Two kinds of activity belong to no step: those launched inside a process-group barrier (the launch call within
-- a `c10d::barrier` / `c10d::monitored_barrier` CPU op on its thread: a barrier after the last step's marker is
-- no step's work, and neither is one between steps), and those timestamped far outside the trace: more than 1 s
-- past the trace's CPU-side span (first to last runtime call, CPU op or annotation) and more than 1 s past the GPU
-- work that ran on from it (a timestamp no step can hold; the GPU runs only what the host launched during the
-- trace, but may run it long after). _far_events lists the latter for steps_build.sql,
-- which counts them per step (steps.far_activities) and drops it.
-- creates: gpu_events.step_index (reset, then updated for one trace), _far_events (temp table)
-- reads: _step_markers, gpu_events, launches, cpu_ops, annotations
-- params: $trace_id
-- grain: one row per GPU activity of the trace (update)
update gpu_events
set step_index = null
where trace_id = $trace_id and step_index is not null;

create or replace temp table _far_events as
with cpu_span as (
    select min(first_ns) as first_ns, max(last_ns) as last_ns
    from (select min(start_ns) as first_ns, max(end_ns) as last_ns from launches where trace_id = $trace_id
          union all
          select min(start_ns), max(end_ns) from cpu_ops where trace_id = $trace_id
          union all
          select min(start_ns), max(end_ns) from annotations where trace_id = $trace_id and kind = 'user_annotation')
),

-- After the CPU span, the GPU may still be running what was launched (a queue seconds deep); what it ran is one
-- chain of activities, each starting before (or within 1 s of) the latest end of those before it. The first
-- activity more than 1 s past both that end and the CPU span breaks the chain: it and all after it are far.
-- Before the CPU span, the mirror image.
after as (
    select gpu_events.event_id, gpu_events.start_ns,
        greatest(cpu_span.last_ns, max(gpu_events.end_ns) over (order by gpu_events.start_ns, gpu_events.event_id
            rows between unbounded preceding and 1 preceding)) as reach_ns
    from gpu_events, cpu_span
    where gpu_events.trace_id = $trace_id and gpu_events.start_ns > cpu_span.last_ns
),

after_break as (
    select min(start_ns) as break_ns from after where start_ns > reach_ns + 1000000000
),

before as (
    select gpu_events.event_id, gpu_events.end_ns,
        least(cpu_span.first_ns, min(gpu_events.start_ns) over (order by gpu_events.end_ns desc, gpu_events.event_id
            rows between unbounded preceding and 1 preceding)) as reach_ns
    from gpu_events, cpu_span
    where gpu_events.trace_id = $trace_id and gpu_events.end_ns < cpu_span.first_ns
),

before_break as (
    select max(end_ns) as break_ns from before where end_ns < reach_ns - 1000000000
)

select after.event_id from after, after_break where after.start_ns >= after_break.break_ns
union all
select before.event_id from before, before_break where before.end_ns <= before_break.break_ns;

update gpu_events
set step_index = assigned.step_index
from (
    with launch_times as (
        select correlation, min(start_ns) as launch_ns
        from launches
        where trace_id = $trace_id and correlation is not null
        group by correlation
    ),

    barriers as (
        select tid, start_ns, end_ns
        from cpu_ops
        where trace_id = $trace_id and name in ('c10d::barrier', 'c10d::monitored_barrier')
    ),

    in_barrier as (  -- launch calls made inside a barrier op on the same thread
        select launches.correlation
        from launches
        join barriers on launches.tid = barriers.tid and launches.start_ns >= barriers.start_ns
            and launches.end_ns <= barriers.end_ns
        where launches.trace_id = $trace_id and launches.correlation is not null
    ),

    activity as (
        select
            gpu_events.event_id,
            case when (select any_value(match_on) from _step_markers) = 'launch'
                 then coalesce(launch_times.launch_ns, gpu_events.start_ns) else gpu_events.start_ns end as anchor_ns
        from gpu_events
        left join launch_times using (correlation)
        where gpu_events.trace_id = $trace_id
            and gpu_events.event_id not in (select event_id from _far_events)
            and (gpu_events.correlation is null or gpu_events.correlation not in (select correlation from in_barrier))
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
