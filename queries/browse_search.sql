-- name: browse_search
-- Kernel names containing $pattern (case-insensitive, in the full or short name), with their category, calls
-- and total GPU time over the whole database, the busiest first, at most $limit.
-- reads: kernel_names, gpu_events
-- params: $pattern, $limit
-- grain: one row per matching kernel name
with matches as (
    select name_id, short_name, name
    from kernel_names
    where contains(lower(name), lower($pattern)) or contains(lower(short_name), lower($pattern))
),

usage as (
    select
        name_id,
        any_value(coalesce(category, 'other')) as category,
        count(*) as calls,
        sum(dur_ns) as total_ns,
        arg_min(trace_id, start_ns) as first_trace_id
    from gpu_events
    where name_id in (select name_id from matches)
    group by name_id
)

select
    matches.name_id,
    matches.short_name,
    usage.category,
    coalesce(usage.calls, 0) as calls,
    round(coalesce(usage.total_ns, 0) / 1e6, 3) as total_ms,
    matches.name
from matches
left join usage using (name_id)
order by usage.total_ns desc nulls last, matches.short_name
limit $limit
