-- name: step_traces
-- The traces whose steps `k25trace steps` rebuilds (k25trace.steps.rebuild), one transaction each, in order.
-- reads: traces
-- params: none
-- grain: one row per loaded trace
select trace_id from traces order by trace_id
