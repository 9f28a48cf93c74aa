-- name: step_lanes
-- One step of a run on each of its ranks, on the reference rank's clock (rank_offsets; offset 0 when the run has
-- no alignment): the rank's GPU window, raw and aligned, its wall/busy/idle, its marker, and the collectives it
-- ran in the step with the wait it suffered and the wait it caused (collectives).
-- reads: steps, trace_runs, traces, rank_offsets, collectives
-- params: $run_id, $step_index
-- grain: one row per rank (trace) of the run that has the step
with lanes as (
    select
        steps.trace_id,
        steps.rank,
        traces.device_name,
        traces.file_name,
        rank_offsets.offset_ns is not null as aligned,
        coalesce(rank_offsets.offset_ns, 0) as offset_ns,
        steps.step_index,
        steps.phase,
        steps.batch_size,
        steps.marker,
        steps.marker_start_ns,
        steps.marker_end_ns,
        steps.gpu_start_ns,
        steps.gpu_end_ns,
        steps.gpu_start_ns - coalesce(rank_offsets.offset_ns, 0) as aligned_start_ns,
        steps.gpu_end_ns - coalesce(rank_offsets.offset_ns, 0) as aligned_end_ns,
        steps.wall_ns,
        steps.busy_ns,
        steps.idle_ns,
        steps.kernel_count
    from steps
    join trace_runs using (trace_id)
    join traces using (trace_id)
    left join rank_offsets using (run_id, trace_id)
    where trace_runs.run_id = $run_id and steps.step_index = $step_index and steps.gpu_start_ns is not null
),

comm as (
    select trace_id, count(*) as collectives, sum(dur_ns)::bigint as collective_ns, sum(wait_ns)::bigint as wait_ns,
        sum(caused_wait_ns)::bigint as caused_wait_ns, count(*) filter (where is_late) as times_late
    from collectives
    where run_id = $run_id and step_index = $step_index
    group by all
)

select
    lanes.*,
    coalesce(comm.collectives, 0) as collectives,
    coalesce(comm.collective_ns, 0) as collective_ns,
    coalesce(comm.wait_ns, 0) as wait_ns,
    coalesce(comm.caused_wait_ns, 0) as caused_wait_ns,
    coalesce(comm.times_late, 0) as times_late
from lanes
left join comm using (trace_id)
order by lanes.rank, lanes.trace_id
