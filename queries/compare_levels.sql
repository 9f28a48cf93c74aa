-- name: compare_levels
-- One side of `k25trace compare`: the `k25trace capture` levels its traces come from, with the client-side
-- figures capture measured (TTFT, TPOT, inter-token latency percentiles, output tokens per second). Empty when
-- the side's traces were not loaded from a capture directory.
-- reads: capture_levels, traces, trace_runs
-- params: $run_id, $level, $trace_ids
-- grain: one row per (capture directory, level) of the selected traces
with selected_levels as (
    select distinct traces.capture_dir, traces.level
    from traces
    left join trace_runs using (trace_id)
    where traces.capture_dir is not null
        and traces.level is not null
        and ($run_id is null or trace_runs.run_id = $run_id)
        and ($level is null or traces.level = $level)
        and ($trace_ids is null or list_contains($trace_ids, traces.trace_id))
)

select
    capture_levels.capture_dir,
    capture_levels.level,
    capture_levels.concurrency,
    capture_levels.requests,
    capture_levels.errors,
    capture_levels.output_tokens,
    capture_levels.output_tok_s,
    capture_levels.ttft_p50_ms, capture_levels.ttft_p90_ms, capture_levels.ttft_p99_ms,
    capture_levels.tpot_p50_ms, capture_levels.tpot_p90_ms, capture_levels.tpot_p99_ms,
    capture_levels.itl_p50_ms, capture_levels.itl_p90_ms, capture_levels.itl_p99_ms
from capture_levels
join selected_levels using (capture_dir, level)
order by capture_levels.capture_dir, capture_levels.concurrency nulls last, capture_levels.level
