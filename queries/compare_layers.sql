-- name: compare_layers
-- One side of `k25trace compare --by layer`: per selected step (run and step index) and segment of step_layers
-- (pre, each layer, post; or the one `step` row of an unsegmented step), the segment's wall time averaged over
-- the ranks that have it (one observation = one engine step, as in the other compare tables), its busy time, the
-- ranks, kind, evidence and layer count (the most common over the ranks), and why the step is unsegmented.
-- reads: _compare_selection, step_layers
-- params: none
-- grain: one row per (run_id, step_index, label) of the selected steps
select
    sel.run_id,
    sel.step_index,
    step_layers.label,
    min(step_layers.segment_index) as segment_index,
    any_value(step_layers.layer) as layer,
    mode(step_layers.kind order by step_layers.kind) as kind,
    mode(step_layers.evidence order by step_layers.evidence) as evidence,
    mode(step_layers.layers order by step_layers.layers) as layers,
    mode(step_layers.reason order by step_layers.reason) as reason,
    count(*) as ranks,
    avg(step_layers.wall_ns) as wall_ns,
    avg(step_layers.busy_ns) as busy_ns
from _compare_selection as sel
join step_layers using (trace_id, step_index)
group by sel.run_id, sel.step_index, step_layers.label
order by sel.run_id, sel.step_index, segment_index
