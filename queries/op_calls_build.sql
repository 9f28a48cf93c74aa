-- name: op_calls_build
-- (Re)build one trace's op_calls: its eager kernels in non-empty steps, each with the CPU op that launched it,
-- grouped first per call (one op invocation: the trace's External id; a kernel without one is a call of its own),
-- then per step phase, batch size, op, input dims and kernel set. A kernel launched eagerly carries the External id
-- of the innermost CPU op that launched it (its launch call's when the kernel has none); that cpu_ops row gives the
-- op name and its Input Dims. Kernels replayed from a CUDA graph are left out (queries/sol_graph_kernels.sql).
-- Needs the kernel_signature macro (sol_steps.sql); runs after steps_build.sql, inside the trace's transaction.
-- creates: none (deletes and inserts op_calls rows of the trace)
-- reads: gpu_events, steps, launches, cpu_ops
-- params: $trace_id
-- grain: one row per (trace_id, phase, batch_size, op, input_dims, kernel_set)
delete from op_calls where trace_id = $trace_id;

insert into op_calls by name
with eager_kernels as (
    select
        steps.phase, steps.batch_size, gpu_events.event_id, gpu_events.name_id, gpu_events.dur_ns,
        gpu_events.category, coalesce(gpu_events.external_id, launches.external_id) as external_id,
        kernel_signature(gpu_events.name_id, gpu_events.grid_x, gpu_events.grid_y, gpu_events.grid_z,
            gpu_events.block_x, gpu_events.block_y, gpu_events.block_z) as sig
    from gpu_events
    join steps
        on steps.trace_id = gpu_events.trace_id and steps.step_index = gpu_events.step_index
        and not steps.is_empty
    left join launches
        on launches.trace_id = gpu_events.trace_id and launches.correlation = gpu_events.correlation
    where gpu_events.trace_id = $trace_id and gpu_events.kind = 'kernel'
        and coalesce(launches.name, '') not ilike '%graphlaunch%'
),

calls as (
    select
        eager_kernels.phase, eager_kernels.batch_size,
        any_value(cpu_ops.name) as op,
        any_value(cpu_ops.input_dims) as input_dims,
        -- string_agg(sig, ' ' order by sig), faster: a NULL signature (no grid or block) left out, NULL for none
        nullif(array_to_string(list_sort(list(eager_kernels.sig) filter (where eager_kernels.sig is not null)), ' '),
            '') as kernel_set,
        count(*) as kernels,
        sum(eager_kernels.dur_ns)::bigint as kernel_ns,
        list_distinct(list(eager_kernels.category)) as categories,
        list_distinct(list(eager_kernels.name_id)) as name_ids
    from eager_kernels
    left join cpu_ops
        on cpu_ops.trace_id = $trace_id and cpu_ops.external_id = eager_kernels.external_id
    group by eager_kernels.phase, eager_kernels.batch_size, eager_kernels.external_id,
        case when eager_kernels.external_id is null then eager_kernels.event_id end
)

select
    $trace_id as trace_id, phase, batch_size, op, input_dims, kernel_set,
    count(*) as calls,
    sum(kernels)::bigint as kernels,
    sum(kernel_ns)::bigint as kernel_ns,
    list_sort(list_distinct(flatten(list(categories)))) as categories,
    list_sort(list_distinct(flatten(list(name_ids)))) as name_ids
from calls
group by phase, batch_size, op, input_dims, kernel_set;
