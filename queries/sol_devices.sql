-- name: sol_devices
-- The GPU of each trace, for matching the device peaks (queries/device_peaks.csv, k25trace/sol.py): its name, its
-- deviceProperties list and the device index most of its kernels ran on (ties: the lowest; sol.py picks that entry
-- of the list).
-- reads: traces, trace_runs, gpu_events
-- params: none
-- grain: one row per (non-front-end) trace
with used as (  -- the device most activities ran on (ties: the lowest index)
    select trace_id, arg_max(device, (activities, -device)) as device
    from (select trace_id, device, count(*) as activities from gpu_events where device is not null group by all)
    group by trace_id
)

select
    trace_runs.run_id, traces.trace_id, traces.rank, trace_runs.world_size, traces.device_name,
    cast(traces.device_properties as varchar) as device_properties, used.device
from traces
join trace_runs using (trace_id)
left join used using (trace_id)
order by trace_runs.run_id, traces.rank, traces.trace_id
