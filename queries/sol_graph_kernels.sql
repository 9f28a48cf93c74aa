-- name: sol_graph_kernels
-- The kernels of the selected steps that were replayed from a CUDA/HIP graph (graph_kernels: their launch is a
-- cudaGraphLaunch): they have no CPU op and so no recorded shapes. Grouped per step and kernel signature
-- (name_id:grid:block, as in queries/sol_op_calls.sql) so that k25trace/sol.py can carry shapes over from the same
-- kernels of an eager step of the same device, world size, phase and batch size where that match is unambiguous. A
-- kernel the trace records no grid or block for has a NULL signature: it cannot be matched, and it is kept apart per
-- kernel name rather than lumped with the step's other such kernels (unsigned_name_id).
-- The roofline reads the same rows with alike steps taken together (sol_graph_step_groups.sql); this query lists
-- them step by step (k25trace sql, and the test that checks the groups against it).
-- reads: sol_graph_step_kernels (macro of sol_steps.sql), graph_kernels, kernel_names, steps, trace_runs, traces
-- params: $phase, $rank, $trace_id
-- grain: one row per (trace, step, kernel signature), per kernel name where the signature is NULL
select *
from sol_graph_step_kernels($phase, $rank, $trace_id)
order by run_id, trace_id, step_index, sig, short_name, unsigned_name_id
