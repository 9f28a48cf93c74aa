-- name: sol_steps
-- The pieces the speed-of-light queries share (sol_op_calls.sql, sol_graph_kernels.sql,
-- sol_graph_step_groups.sql, sol_step_counts.sql, op_calls_build.sql), defined once as temporary macros;
-- k25trace/sol.py runs this file before those queries (idempotent):
--   sol_selected_steps(p_phase, p_rank, p_trace_id): the steps of the schema's selected_steps (non-empty, of a
--     phase ('all': every phase), a rank and a trace (NULL: all)) with their run, world size and device;
--   kernel_signature(name_id, grid_x, grid_y, grid_z, block_x, block_y, block_z): 'name_id:GXxGYxGZ:BXxBYxBZ',
--     how an eager kernel and its CUDA-graph replay are recognised as the same kernel;
--   sol_graph_step_kernels(p_phase, p_rank, p_trace_id): the selected steps' kernels replayed from a CUDA graph
--     (graph_kernels) per step and signature, with the step's context (sol_graph_kernels.sql lists them,
--     sol_graph_step_groups.sql groups alike steps).
-- creates: sol_selected_steps (temp table macro), kernel_signature (temp macro), sol_graph_step_kernels (temp table macro)
-- reads: selected_steps (macro), trace_runs, traces, graph_kernels, kernel_names
-- params: none
-- grain: sol_selected_steps = one row per selected step per trace (rank); sol_graph_step_kernels = one row per (trace, step, kernel signature), per kernel name where the signature is NULL
create or replace temp macro sol_selected_steps(p_phase, p_rank, p_trace_id) as table
    select
        steps.trace_id, steps.step_index, steps.phase, steps.batch_size, trace_runs.run_id, trace_runs.world_size,
        traces.device_name
    from selected_steps(p_phase, p_rank, p_trace_id) as steps
    join trace_runs using (trace_id)
    join traces using (trace_id);

create or replace temp macro kernel_signature(name_id, grid_x, grid_y, grid_z, block_x, block_y, block_z) as
    name_id || ':' || grid_x || 'x' || grid_y || 'x' || grid_z || ':' || block_x || 'x' || block_y || 'x' || block_z;

create or replace temp macro sol_graph_step_kernels(p_phase, p_rank, p_trace_id) as table
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
    join sol_selected_steps(p_phase, p_rank, p_trace_id) as selected using (trace_id, step_index)
    join kernel_names using (name_id)
    group by all;
