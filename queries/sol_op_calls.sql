-- name: sol_op_calls
-- The CPU ops behind the kernels of the selected steps, with their recorded shapes, for the speed-of-light views
-- (k25trace/sol.py) and the findings: the op_calls rows of the selected traces' phases and batch sizes
-- (queries/op_calls_build.sql, built per trace with its steps), added up over the ranks of each run. One call = one
-- op invocation (trace, External id) and all the kernels it launched (e.g. a split-K GEMM and its reduce); its
-- kernel set is the sorted list of the kernels' signatures (name_id:grid:block). Kernels replayed from a CUDA graph
-- are left out (queries/sol_graph_kernels.sql); a kernel whose op was not recorded comes out with op NULL.
-- reads: sol_selected_steps (macro of sol_steps.sql), op_calls, kernel_names
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

-- op_calls holds the kernels of every non-empty step: a trace's (phase, batch size) is selected whole or not at all
selected_groups as (
    select distinct trace_id, phase, batch_size, run_id, world_size, device_name
    from selected
),

grouped as (
    select
        selected_groups.run_id, op_calls.phase, op_calls.batch_size,
        any_value(selected_groups.world_size) as world_size, selected_groups.device_name, op_calls.op,
        op_calls.input_dims, op_calls.kernel_set,
        sum(op_calls.calls)::bigint as calls,
        sum(op_calls.kernels)::bigint as kernels,
        sum(op_calls.kernel_ns)::bigint as kernel_ns,
        list_distinct(flatten(list(op_calls.categories))) as categories,
        list_distinct(flatten(list(op_calls.name_ids))) as name_ids
    from op_calls
    join selected_groups
        on selected_groups.trace_id = op_calls.trace_id and selected_groups.phase = op_calls.phase
        and selected_groups.batch_size is not distinct from op_calls.batch_size
    group by selected_groups.run_id, op_calls.phase, op_calls.batch_size, selected_groups.device_name,
        op_calls.op, op_calls.input_dims, op_calls.kernel_set
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
order by grouped.run_id, grouped.batch_size, grouped.kernel_ns desc, grouped.op, grouped.input_dims,
    grouped.kernel_set, grouped.phase, grouped.device_name
