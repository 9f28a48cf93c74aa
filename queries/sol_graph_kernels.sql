-- name: sol_graph_kernels
-- The kernels of the selected steps that were replayed from a CUDA/HIP graph (graph_kernels: their launch is a
-- cudaGraphLaunch): they have no CPU op and so no recorded shapes. Grouped per step and kernel signature
-- (name_id:grid:block, as in queries/sol_op_calls.sql) so that k25trace/sol.py can carry shapes over from the same
-- kernels of an eager step of the same device, world size, phase and batch size where that match is unambiguous. A
-- kernel the trace records no grid or block for has a NULL signature: it cannot be matched, and it is kept apart per
-- kernel name rather than lumped with the step's other such kernels (unsigned_name_id).
-- The roofline reads the same rows with alike steps taken together (sol_graph_step_groups.sql); this query lists
-- them step by step (k25trace sql, and the test that checks the groups against it).
-- reads: sol_selected_steps (macro of sol_steps.sql), kernel_signature (macro of sol_steps.sql), steps, trace_runs, traces, graph_kernels, kernel_names
-- params: $phase, $rank, $trace_id
-- grain: one row per (trace, step, kernel signature), per kernel name where the signature is NULL
with selected as (
    select * from sol_selected_steps($phase, $rank, $trace_id)
)

select
    selected.run_id, selected.phase, selected.batch_size, selected.world_size, selected.device_name,
    replayed.trace_id, replayed.step_index,
    kernel_signature(replayed.name_id, replayed.grid_x, replayed.grid_y, replayed.grid_z,
        replayed.block_x, replayed.block_y, replayed.block_z) as sig,
    case when sig is null then replayed.name_id end as unsigned_name_id,
    sum(replayed.kernels)::bigint as kernels,
    sum(replayed.kernel_ns)::bigint as kernel_ns,
    any_value(replayed.category) as category,
    any_value(kernel_names.short_name) as short_name
from graph_kernels as replayed
join selected using (trace_id, step_index)
join kernel_names using (name_id)
group by all
order by selected.run_id, replayed.trace_id, replayed.step_index, sig, short_name, unsigned_name_id
