-- name: report_allreduce_floor
-- AllReduce per step against its floor, per run (trace_runs.run_id: one capture level or directory and world size)
-- and batch size: the observed all-reduce
-- time per step (summed kernel time of category 'allreduce', mean over the steps of all ranks; the exclusive
-- time beside it), the wait part of it (the collectives table's wait_ns: time spent waiting for the slowest
-- rank; NULL without a multi-rank run) and the transfer rest, and the floor: the same number of all-reduces of
-- the same message size run back to back by `k25trace bench allreduce` on the same world size (CUDA-graph burst
-- when measured, else eager; the latest bench run; per-op time x the observed count). efficiency = floor /
-- observed, transfer_efficiency = floor / (observed - wait). Two floors: floor_ms, the burst's wall time per
-- all-reduce x count (what a step pays at least, kernels plus what lies between them), and floor_kernel_ms, the
-- NCCL kernel time alone (profiled in the bench; NULL for gloo and older bench runs). The efficiencies compare
-- like with like: kernel time with kernel time where the bench has it (floor_basis = 'kernel'), else the wall
-- floor (floor_basis = 'wall', an upper bound of the kernel floor: read those efficiencies as approximate). The
-- message size is the traces' (In msg nelems x dtype) where recorded, else the bench row measured for that
-- batch size.
-- reads: selected_steps (macro), step_categories, gpu_events, collectives, traces, trace_runs, allreduce_bench, dtype_bytes (macro)
-- params: $phase, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per (run_id, batch_size)
with selected as (
    select steps.trace_id, steps.rank, steps.step_index, steps.batch_size, trace_runs.run_id, traces.level,
        traces.world_size
    from selected_steps($phase, null, null, of_batch_size := $batch_size, of_run_id := $run_id) as steps
    join traces using (trace_id)
    join trace_runs using (trace_id)
),

per_step as (
    select
        selected.run_id, selected.level, selected.world_size, selected.batch_size, selected.trace_id, selected.step_index,
        coalesce(step_categories.kernel_ns, 0) as ar_kernel_ns,
        coalesce(step_categories.busy_ns, 0) as ar_busy_ns,
        coalesce(step_categories.kernel_count, 0) as ar_calls
    from selected
    left join step_categories
        on step_categories.trace_id = selected.trace_id
        and step_categories.step_index = selected.step_index
        and step_categories.category = 'allreduce'
),

waits as (
    select collectives.trace_id, collectives.step_index, sum(collectives.wait_ns) as wait_ns
    from collectives
    join selected using (trace_id, step_index)
    where collectives.category = 'allreduce'
    group by all
),

sizes as (
    select
        selected.run_id, selected.world_size, selected.batch_size,
        gpu_events.msg_in_nelems * dtype_bytes(gpu_events.msg_dtype) as size_bytes
    from gpu_events
    join selected using (trace_id, step_index)
    where gpu_events.category = 'allreduce' and gpu_events.msg_in_nelems is not null
),

group_sizes as (
    select run_id, world_size, batch_size, mode(size_bytes order by size_bytes) as size_bytes
    from sizes
    where size_bytes is not null
    group by all
),

observed as (
    select
        per_step.run_id, any_value(per_step.level) as level, per_step.world_size, per_step.batch_size,
        count(*) as steps,
        count(distinct per_step.trace_id) as ranks,
        avg(per_step.ar_calls) as calls_per_step,
        avg(per_step.ar_kernel_ns) as kernel_ns,
        avg(per_step.ar_busy_ns) as busy_ns,
        avg(waits.wait_ns) as wait_ns,
        count(waits.wait_ns) as steps_with_wait
    from per_step
    left join waits using (trace_id, step_index)
    group by all
),

candidates as (
    select
        observed.run_id, observed.world_size, observed.batch_size,
        allreduce_bench.bench_run, allreduce_bench.backend, allreduce_bench.device_name, allreduce_bench.mode,
        allreduce_bench.size_bytes, allreduce_bench.count, allreduce_bench.median_us, allreduce_bench.burst_ms,
        allreduce_bench.busbw_gbps, allreduce_bench.kernel_median_us,
        coalesce(allreduce_bench.kernel_median_us, allreduce_bench.median_us) as basis_us,
        row_number() over (
            partition by observed.run_id, observed.batch_size
            order by case allreduce_bench.mode when 'graph' then 0 else 1 end, allreduce_bench.measured_at desc,
                allreduce_bench.bench_run desc, allreduce_bench.count desc, allreduce_bench.median_us
        ) as preference
    from observed
    left join group_sizes
        on group_sizes.run_id = observed.run_id
        and group_sizes.batch_size is not distinct from observed.batch_size
    join allreduce_bench
        on allreduce_bench.world_size = observed.world_size
        and allreduce_bench.mode in ('graph', 'eager')
        and (
            (group_sizes.size_bytes is not null and allreduce_bench.size_bytes = group_sizes.size_bytes)
            or (group_sizes.size_bytes is null and allreduce_bench.batch_size = observed.batch_size)
        )
),

floor_pick as (
    select * from candidates where preference = 1
)

select
    observed.run_id,
    observed.level,
    observed.world_size,
    observed.batch_size,
    observed.steps,
    observed.ranks,
    round(observed.calls_per_step, 2) as allreduce_per_step,
    group_sizes.size_bytes as msg_bytes,
    round(observed.kernel_ns / 1e6, 4) as observed_ms,
    round(observed.busy_ns / 1e6, 4) as exclusive_ms,
    round(observed.wait_ns / 1e6, 4) as wait_ms,
    round((observed.kernel_ns - coalesce(observed.wait_ns, 0)) / 1e6, 4) as transfer_ms,
    floor_pick.mode as floor_mode,
    floor_pick.backend as floor_backend,
    floor_pick.device_name as floor_device,
    floor_pick.size_bytes as floor_bytes,
    floor_pick.count as bench_count,
    round(floor_pick.median_us, 2) as floor_us_per_op,
    round(floor_pick.median_us * observed.calls_per_step / 1e3, 4) as floor_ms,
    round(floor_pick.busbw_gbps, 3) as floor_busbw_gbps,
    round(floor_pick.kernel_median_us, 2) as floor_kernel_us,
    round(floor_pick.kernel_median_us * observed.calls_per_step / 1e3, 4) as floor_kernel_ms,
    case when floor_pick.kernel_median_us is not null then 'kernel' when floor_pick.median_us is not null then 'wall'
    end as floor_basis,
    round(floor_pick.basis_us * observed.calls_per_step * 1e3 / nullif(observed.kernel_ns, 0), 4) as efficiency,
    round(floor_pick.basis_us * observed.calls_per_step * 1e3
        / nullif(observed.kernel_ns - coalesce(observed.wait_ns, 0), 0), 4) as transfer_efficiency
from observed
left join group_sizes
    on group_sizes.run_id = observed.run_id
    and group_sizes.batch_size is not distinct from observed.batch_size
left join floor_pick
    on floor_pick.run_id = observed.run_id
    and floor_pick.batch_size is not distinct from observed.batch_size
order by observed.run_id, observed.batch_size
