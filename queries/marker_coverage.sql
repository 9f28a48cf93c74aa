-- name: marker_coverage
-- Which traces have engine-step markers and which had their steps inferred from idle gaps (no vLLM
-- `execute_…`, SGLang `step[…]` or GPU-annotation copies of them were found), with their step counts by phase.
-- reads: steps, traces
-- params: none
-- grain: one row per non-front-end trace
select
    traces.trace_id,
    traces.rank,
    traces.file_name,
    coalesce(bool_or(steps.is_inferred), false) as inferred,
    count(steps.step_index) filter (where not steps.is_empty) as steps,
    count(steps.step_index) filter (where steps.phase = 'decode' and not steps.is_empty) as decode_steps
from traces
left join steps using (trace_id)
where not traces.is_frontend
group by all
order by traces.trace_id
