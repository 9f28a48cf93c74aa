-- name: browse_kernel
-- Everything known about one GPU activity: full and short name, category, step, stream, timing, grid and block,
-- registers, shared memory, occupancy, collective arguments, and the CPU call that launched it (joined on
-- correlation: cudaGraphLaunch/hipGraphLaunch means it ran inside a CUDA graph). $start_ns is the activity's start
-- and bounds the scans.
-- reads: gpu_events, kernel_names, kernel_classes, launches
-- params: $trace_id, $event_id, $start_ns
-- grain: one row (none when the activity does not exist)
with activity as (
    select *
    from gpu_events
    where trace_id = $trace_id and start_ns = $start_ns and event_id = $event_id
),

launch as (
    select launches.correlation, launches.name, launches.api, launches.start_ns, launches.dur_ns
    from launches
    where launches.trace_id = $trace_id
        and launches.start_ns between $start_ns - 10000000000 and $start_ns
        and launches.correlation in (select correlation from activity)
    order by launches.start_ns desc
    limit 1
)

select
    activity.trace_id,
    activity.rank,
    activity.event_id,
    activity.step_index,
    activity.kind,
    activity.name_id,
    kernel_names.short_name,
    kernel_names.name,
    coalesce(activity.category, 'other') as category,
    activity.device,
    activity.stream,
    activity.start_ns,
    round(activity.dur_ns / 1e3, 2) as dur_us,
    activity.correlation,
    activity.external_id,
    launch.name as launch_name,
    launch.api as launch_api,
    coalesce(launch.name ilike '%graphlaunch%', false) as is_graph,
    round((activity.start_ns - launch.start_ns) / 1e3, 1) as launch_to_start_us,
    activity.grid_x, activity.grid_y, activity.grid_z,
    activity.block_x, activity.block_y, activity.block_z,
    activity.registers,
    activity.shared_mem_bytes,
    activity.blocks_per_sm,
    activity.warps_per_sm,
    activity.occupancy_pct,
    activity.bytes,
    activity.collective_name,
    activity.msg_in_nelems,
    activity.msg_out_nelems,
    activity.msg_dtype,
    activity.group_size,
    activity.pg_name,
    activity.pg_ranks
from activity
join kernel_names using (name_id)
left join launch on launch.correlation = activity.correlation
