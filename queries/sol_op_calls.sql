-- name: sol_op_calls
-- The CPU ops behind the kernels of the selected steps, with their recorded shapes, for the speed-of-light views
-- (k25trace/sol.py). A kernel launched eagerly carries the External id of the innermost CPU op that launched it
-- (its launch call's when the kernel has none); that cpu_ops row gives the op name and its Input Dims (record_shapes).
-- One call = one op invocation (trace, External id) and all the kernels it launched (e.g. a split-K GEMM and its
-- reduce); its kernel set is the sorted list of the kernels' signatures (name_id:grid:block). Calls are grouped per
-- run, phase, batch size, device, op, input dims and kernel set. Kernels replayed from a CUDA graph are left out
-- (queries/sol_graph_kernels.sql); a kernel whose op was not recorded comes out with op NULL.
-- reads: sol_selected_steps (macro of sol_steps.sql), kernel_signature (macro of sol_steps.sql), steps, trace_runs, traces, gpu_events, launches, cpu_ops, kernel_names
-- params: $phase, $rank, $trace_id
-- grain: one row per (run_id, phase, batch_size, device_name, op, input_dims, kernel_set)
with selected as (
    select * from sol_selected_steps($phase, $rank, $trace_id)
),

group_steps as (
    select run_id, phase, batch_size, count(*) as steps
    from selected
    group by all
),

eager_kernels as (
    select
        selected.run_id, selected.phase, selected.batch_size, selected.world_size, selected.device_name,
        gpu_events.trace_id, gpu_events.event_id, gpu_events.name_id, gpu_events.dur_ns, gpu_events.category,
        coalesce(gpu_events.external_id, launches.external_id) as external_id,
        kernel_signature(gpu_events.name_id, gpu_events.grid_x, gpu_events.grid_y, gpu_events.grid_z,
            gpu_events.block_x, gpu_events.block_y, gpu_events.block_z) as sig
    from gpu_events
    join selected using (trace_id, step_index)
    left join launches
        on launches.trace_id = gpu_events.trace_id and launches.correlation = gpu_events.correlation
    where gpu_events.kind = 'kernel' and coalesce(launches.name, '') not ilike '%graphlaunch%'
),

calls as (
    select
        eager_kernels.run_id, eager_kernels.phase, eager_kernels.batch_size, eager_kernels.world_size,
        eager_kernels.device_name, eager_kernels.trace_id,
        -- a kernel without a recorded op is a call of its own
        coalesce(eager_kernels.external_id::varchar, 'event ' || min(eager_kernels.event_id)) as call_key,
        any_value(cpu_ops.name) as op,
        any_value(cpu_ops.input_dims) as input_dims,
        string_agg(eager_kernels.sig, ' ' order by eager_kernels.sig) as kernel_set,
        count(*) as kernels,
        sum(eager_kernels.dur_ns)::bigint as kernel_ns,
        list(distinct eager_kernels.category order by eager_kernels.category) as categories,
        list(distinct eager_kernels.name_id) as name_ids
    from eager_kernels
    left join cpu_ops
        on cpu_ops.trace_id = eager_kernels.trace_id and cpu_ops.external_id = eager_kernels.external_id
    group by eager_kernels.run_id, eager_kernels.phase, eager_kernels.batch_size, eager_kernels.world_size,
        eager_kernels.device_name, eager_kernels.trace_id, eager_kernels.external_id,
        case when eager_kernels.external_id is null then eager_kernels.event_id end
),

grouped as (
    select
        run_id, phase, batch_size, any_value(world_size) as world_size, device_name, op, input_dims, kernel_set,
        count(*) as calls,
        sum(kernels)::bigint as kernels,
        sum(kernel_ns)::bigint as kernel_ns,
        list_distinct(flatten(list(categories))) as categories,
        list_distinct(flatten(list(name_ids))) as name_ids
    from calls
    group by run_id, phase, batch_size, device_name, op, input_dims, kernel_set
)

select
    grouped.run_id, grouped.phase, grouped.batch_size, grouped.world_size, grouped.device_name, group_steps.steps,
    grouped.op, grouped.input_dims, grouped.kernel_set, grouped.calls, grouped.kernels, grouped.kernel_ns,
    list_sort(grouped.categories) as categories,
    (select list(left(kernel_names.name, 2000) order by kernel_names.name_id) from kernel_names
        where list_contains(grouped.name_ids, kernel_names.name_id)) as kernel_names
from grouped
join group_steps
    on group_steps.run_id = grouped.run_id and group_steps.phase = grouped.phase
    and group_steps.batch_size is not distinct from grouped.batch_size
order by grouped.run_id, grouped.batch_size, grouped.kernel_ns desc, grouped.op, grouped.input_dims, grouped.kernel_set
