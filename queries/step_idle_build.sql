-- name: step_idle_build
-- (Re)build one trace's step_idle: its GPU idle gaps (gpu_gaps, queries/gaps_build.sql) added up per step and
-- cause, the in-step gaps apart from the gaps between the previous step and this one; with the in-step gaps' count,
-- the longest, and the median and max launch_ns of the host and sync ones. Runs after gaps_build.sql, inside the
-- trace's transaction.
-- creates: none (deletes and inserts step_idle rows of the trace)
-- reads: gpu_gaps
-- params: $trace_id
-- grain: one row per step of the trace with at least one gap
delete from step_idle where trace_id = $trace_id;

insert into step_idle by name
select
    trace_id, step_index,
    count(*) filter (where not between_steps) as gaps,
    coalesce(sum(host_ns) filter (where not between_steps), 0)::bigint as host_ns,
    coalesce(sum(sync_ns) filter (where not between_steps), 0)::bigint as sync_ns,
    coalesce(sum(launch_ns) filter (where not between_steps), 0)::bigint as launch_ns,
    coalesce(sum(device_ns) filter (where not between_steps), 0)::bigint as device_ns,
    coalesce(sum(unknown_ns) filter (where not between_steps), 0)::bigint as unknown_ns,
    max(dur_ns) filter (where not between_steps) as longest_gap_ns,
    quantile_cont(launch_ns, 0.5) filter (where not between_steps and cause in ('host', 'sync')) as launch_p50_ns,
    max(launch_ns) filter (where not between_steps and cause in ('host', 'sync')) as launch_max_ns,
    count(*) filter (where between_steps) as between_gaps,
    coalesce(sum(dur_ns) filter (where between_steps), 0)::bigint as between_idle_ns,
    coalesce(sum(host_ns) filter (where between_steps), 0)::bigint as between_host_ns,
    coalesce(sum(sync_ns) filter (where between_steps), 0)::bigint as between_sync_ns,
    coalesce(sum(launch_ns) filter (where between_steps), 0)::bigint as between_launch_ns,
    coalesce(sum(device_ns) filter (where between_steps), 0)::bigint as between_device_ns,
    coalesce(sum(unknown_ns) filter (where between_steps), 0)::bigint as between_unknown_ns
from gpu_gaps
where trace_id = $trace_id and step_index is not null
group by trace_id, step_index;
