-- name: browse_levels
-- The load levels of the `k25trace capture` runs in the database with their client-side throughput and
-- latency figures and how many rank traces each level has.
-- reads: capture_levels, traces
-- params: none
-- grain: one row per (capture directory, level)
with level_traces as (
    select capture_dir, level, count(*) as traces, count(distinct rank) as ranks
    from traces
    where capture_dir is not null
    group by all
)

select
    regexp_extract(capture_levels.capture_dir, '[^/]*$') as run,
    capture_levels.level,
    capture_levels.concurrency,
    coalesce(level_traces.ranks, 0) as ranks,
    capture_levels.requests,
    capture_levels.errors,
    round(capture_levels.output_tok_s, 1) as output_tok_s,
    round(capture_levels.tpot_p50_ms, 2) as tpot_p50_ms,
    round(capture_levels.ttft_p50_ms, 1) as ttft_p50_ms,
    round(capture_levels.itl_p90_ms, 2) as itl_p90_ms
from capture_levels
left join level_traces using (capture_dir, level)
order by capture_levels.capture_dir, capture_levels.concurrency nulls last, capture_levels.level
