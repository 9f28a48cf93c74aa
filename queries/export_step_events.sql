-- name: export_step_events
-- The GPU activities (kernels, memcpys, memsets) of the chosen steps of one run on the chosen ranks, for a Chrome
-- trace excerpt: each with its rank's clock offset (rank_offsets; 0 without alignment) and start on the reference
-- rank's clock, its kernel names and launch facts, its step's batch size, and for a paired collective its
-- transfer/wait split, its call site and the rank that arrived last (collectives).
-- reads: gpu_events, kernel_names, trace_runs, rank_offsets, collectives, steps
-- params: $run_id, $steps, $ranks
-- grain: one row per GPU activity of the chosen steps and ranks
with run_collectives as (
    select
        *,
        max(case when is_late then rank end) over (partition by pair_step, category, ordinal) as late_rank
    from collectives
    where run_id = $run_id
)

select
    gpu_events.trace_id,
    gpu_events.rank,
    gpu_events.event_id,
    gpu_events.kind,
    gpu_events.step_index,
    steps.batch_size,
    steps.phase,
    gpu_events.device,
    gpu_events.stream,
    gpu_events.start_ns,
    gpu_events.dur_ns,
    gpu_events.end_ns,
    coalesce(rank_offsets.offset_ns, 0) as offset_ns,
    gpu_events.start_ns - coalesce(rank_offsets.offset_ns, 0) as aligned_start_ns,
    coalesce(gpu_events.category, 'other') as category,
    gpu_events.name_id,
    kernel_names.short_name,
    kernel_names.name,
    gpu_events.correlation,
    gpu_events.external_id,
    gpu_events.grid_x, gpu_events.grid_y, gpu_events.grid_z,
    gpu_events.block_x, gpu_events.block_y, gpu_events.block_z,
    gpu_events.registers,
    gpu_events.shared_mem_bytes,
    gpu_events.occupancy_pct,
    gpu_events.bytes,
    gpu_events.collective_name,
    gpu_events.msg_in_nelems,
    gpu_events.msg_dtype,
    run_collectives.ordinal as call_site,
    run_collectives.transfer_ns::bigint as transfer_ns,
    run_collectives.wait_ns::bigint as wait_ns,
    run_collectives.wait_kind,
    run_collectives.is_late,
    run_collectives.late_rank,
    run_collectives.lateness_ns::bigint as lateness_ns,
    run_collectives.caused_wait_ns::bigint as caused_wait_ns,
    run_collectives.skew_ns::bigint as skew_ns
from gpu_events
join trace_runs using (trace_id)
join kernel_names using (name_id)
join steps using (trace_id, step_index)
left join rank_offsets using (run_id, trace_id)
left join run_collectives on run_collectives.trace_id = gpu_events.trace_id
    and run_collectives.event_id = gpu_events.event_id
where trace_runs.run_id = $run_id
    and list_contains($steps, gpu_events.step_index)
    and ($ranks is null or list_contains($ranks, gpu_events.rank))
order by gpu_events.rank, gpu_events.start_ns, gpu_events.event_id
