-- name: sol_steps
-- The two pieces the speed-of-light queries share (sol_op_calls.sql, sol_graph_kernels.sql,
-- sol_graph_step_groups.sql, sol_step_counts.sql, op_calls_build.sql), defined once as temporary macros;
-- k25trace/sol.py runs this file before those queries (idempotent):
--   sol_selected_steps(p_phase, p_rank, p_trace_id): the steps of the schema's selected_steps (non-empty, of a
--     phase ('all': every phase), a rank and a trace (NULL: all)) with their run, world size and device;
--   kernel_signature(name_id, grid_x, grid_y, grid_z, block_x, block_y, block_z): 'name_id:GXxGYxGZ:BXxBYxBZ',
--     how an eager kernel and its CUDA-graph replay are recognised as the same kernel.
-- creates: sol_selected_steps (temp table macro), kernel_signature (temp macro)
-- reads: selected_steps (macro), trace_runs, traces
-- params: none
-- grain: sol_selected_steps = one row per selected step per trace (rank)
create or replace temp macro sol_selected_steps(p_phase, p_rank, p_trace_id) as table
    select
        steps.trace_id, steps.step_index, steps.phase, steps.batch_size, trace_runs.run_id, trace_runs.world_size,
        traces.device_name
    from selected_steps(p_phase, p_rank, p_trace_id) as steps
    join trace_runs using (trace_id)
    join traces using (trace_id);

create or replace temp macro kernel_signature(name_id, grid_x, grid_y, grid_z, block_x, block_y, block_z) as
    name_id || ':' || grid_x || 'x' || grid_y || 'x' || grid_z || ':' || block_x || 'x' || block_y || 'x' || block_z;
