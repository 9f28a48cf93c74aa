-- name: run_levels
-- What a capture measured at each level of a run, beside the traces: the request statistics of capture_levels
-- (TPOT, TTFT, output tok/s) for the run of that capture level.
-- reads: capture_levels, traces, trace_runs
-- params: none
-- grain: one row per run that comes from a capture level with statistics
with run_of_level as (
    select distinct trace_runs.run_id, traces.capture_dir, traces.level
    from trace_runs
    join traces using (trace_id)
    where traces.capture_dir is not null and traces.level is not null
)

select
    run_of_level.run_id,
    capture_levels.level,
    capture_levels.concurrency,
    capture_levels.requests,
    capture_levels.errors,
    capture_levels.output_tokens,
    capture_levels.duration_s,
    capture_levels.output_tok_s,
    capture_levels.ttft_p50_ms,
    capture_levels.ttft_p90_ms,
    capture_levels.tpot_p50_ms,
    capture_levels.tpot_p90_ms,
    capture_levels.tpot_p99_ms,
    capture_levels.itl_p50_ms
from run_of_level
join capture_levels using (capture_dir, level)
order by capture_levels.concurrency nulls last, run_of_level.run_id
