-- name: browse_kernel_first
-- Where to open a kernel picked by name: its first run on trace $trace_id, else its first run anywhere.
-- reads: gpu_events
-- params: $trace_id, $name_id
-- grain: one row (none when the kernel never ran)
select trace_id, event_id, start_ns, step_index
from gpu_events
where name_id = $name_id
order by trace_id is distinct from $trace_id, trace_id, start_ns
limit 1
