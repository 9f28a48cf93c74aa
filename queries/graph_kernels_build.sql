-- name: graph_kernels_build
-- (Re)build one trace's graph_kernels: the kernels of its steps that were replayed from a CUDA/HIP graph (their
-- launch, found by correlation id, is a cudaGraphLaunch / hipGraphLaunch), grouped per step, kernel name, grid,
-- block and category. queries/sol_graph_kernels.sql and sol_graph_step_groups.sql read them. Runs after
-- steps_build.sql, inside the trace's transaction.
-- creates: none (deletes and inserts graph_kernels rows of the trace)
-- reads: gpu_events, launches
-- params: $trace_id
-- grain: one row per (trace_id, step_index, name_id, grid, block, category)
delete from graph_kernels where trace_id = $trace_id;

insert into graph_kernels by name
select
    gpu_events.trace_id, gpu_events.step_index, gpu_events.name_id, gpu_events.grid_x, gpu_events.grid_y,
    gpu_events.grid_z, gpu_events.block_x, gpu_events.block_y, gpu_events.block_z, gpu_events.category,
    count(*) as kernels,
    sum(gpu_events.dur_ns)::bigint as kernel_ns
from gpu_events
join launches on launches.trace_id = $trace_id and launches.correlation = gpu_events.correlation
where gpu_events.trace_id = $trace_id and gpu_events.kind = 'kernel' and gpu_events.step_index is not null
    and launches.name ilike '%graphlaunch%'
group by all;
