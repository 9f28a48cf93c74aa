-- name: sol_graph_kernels
-- The kernels of the selected steps that were replayed from a CUDA/HIP graph (their launch is a cudaGraphLaunch):
-- they have no CPU op and so no recorded shapes. Grouped per step and kernel signature (name_id:grid:block, as in
-- queries/sol_op_calls.sql) so that k25trace/sol.py can carry shapes over from the same kernels of an eager step
-- of the same device, world size, phase and batch size where that match is unambiguous. A kernel the trace records
-- no grid or block for has a NULL signature: it cannot be matched, and it is kept apart per kernel name rather
-- than lumped with the step's other such kernels (unsigned_name_id). The kernels are grouped by their raw columns
-- before the signature text is made, once per group rather than per kernel.
-- reads: sol_selected_steps (macro of sol_steps.sql), kernel_signature (macro of sol_steps.sql), steps, trace_runs, traces, gpu_events, launches, kernel_names
-- params: $phase, $rank, $trace_id
-- grain: one row per (trace, step, kernel signature), per kernel name where the signature is NULL
with selected as (
    select * from sol_selected_steps($phase, $rank, $trace_id)
),

replayed as (
    select
        gpu_events.trace_id, gpu_events.step_index, gpu_events.name_id, gpu_events.grid_x, gpu_events.grid_y,
        gpu_events.grid_z, gpu_events.block_x, gpu_events.block_y, gpu_events.block_z,
        count(*) as kernels, sum(gpu_events.dur_ns) as kernel_ns, any_value(gpu_events.category) as category
    from gpu_events
    join selected using (trace_id, step_index)
    join launches on launches.trace_id = gpu_events.trace_id and launches.correlation = gpu_events.correlation
    where gpu_events.kind = 'kernel' and launches.name ilike '%graphlaunch%'
    group by all
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
from replayed
join selected using (trace_id, step_index)
join kernel_names using (name_id)
group by all
order by selected.run_id, replayed.trace_id, replayed.step_index, sig, short_name, unsigned_name_id
