-- name: browse_kernel_steps
-- How one kernel's duration varies from step to step on one trace (rank): per step its calls and min/mean/max µs.
-- reads: gpu_events
-- params: $trace_id, $name_id
-- grain: one row per step of the trace in which the kernel ran
select
    step_index,
    count(*) as calls,
    round(min(dur_ns) / 1e3, 2) as min_us,
    round(avg(dur_ns) / 1e3, 2) as mean_us,
    round(max(dur_ns) / 1e3, 2) as max_us
from gpu_events
where trace_id = $trace_id and name_id = $name_id and step_index is not null
group by step_index
order by step_index
