-- name: report_comm_bandwidth
-- Bandwidth of the observed collectives, per run, batch size, collective and message size: the transfer part of
-- each paired collective (the shortest duration across ranks: what the wire took once everyone had arrived),
-- its median and p90, algorithm bandwidth = bytes / transfer and bus bandwidth = algbw x the collective's factor
-- (all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; others 1), as nccl-tests defines them.
-- Bytes: all_gather counts its output (msg_out_nelems), every other collective its input, times
-- dtype_bytes(msg_dtype). The message size comes from the trace's collective args (size_source 'trace'); CUDA-graph
-- replays record none, so for all-reduces without args the `k25trace bench allreduce` row measured for that batch
-- size gives it (size_source 'bench'); else the size is unknown and so is the bandwidth. Beside each all-reduce
-- size: the bench's kernel-only time for that size (graph burst preferred, latest run) and its bus bandwidth.
-- reads: collectives, gpu_events, selected_steps (macro), trace_runs, allreduce_bench, dtype_bytes (macro)
-- params: $phase, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per (run, batch_size, category, collective, size_bytes)
with steps_of_run as (
    select trace_runs.run_id, steps.step_index, any_value(steps.batch_size) as batch_size,
        any_value(trace_runs.world_size) as world_size
    from selected_steps($phase, null, null, of_batch_size := $batch_size, of_run_id := $run_id) as steps
    join trace_runs using (trace_id)
    group by all
),

with_args as (
    -- the GPU activities that carry collective args (a few in a million): the rest would add only NULLs below
    select trace_id, event_id, collective_name, msg_in_nelems, msg_out_nelems, msg_dtype, group_size
    from gpu_events
    where collective_name is not null or msg_in_nelems is not null or msg_out_nelems is not null
        or msg_dtype is not null or group_size is not null
),

calls as (
    select
        collectives.run_id, collectives.pair_step, collectives.category, collectives.ordinal,
        any_value(steps_of_run.batch_size) as batch_size,
        any_value(steps_of_run.world_size) as world_size,
        any_value(collectives.transfer_ns) as transfer_ns,
        -- the collective's name and size from the ranks' kernels that carry args (they agree; min: deterministic)
        min(gpu_events.collective_name) as collective_name,
        min(case when gpu_events.collective_name = 'all_gather' then gpu_events.msg_out_nelems
            else gpu_events.msg_in_nelems end * dtype_bytes(gpu_events.msg_dtype)) as trace_bytes,
        min(gpu_events.group_size) as group_size
    from collectives
    join steps_of_run using (run_id, step_index)
    left join with_args as gpu_events
        on gpu_events.trace_id = collectives.trace_id and gpu_events.event_id = collectives.event_id
    group by all
),

bench_sizes as (
    -- the latest bench run's size for the batch size (ties: the last bench_run name, then the largest size)
    select world_size, batch_size, arg_max(size_bytes, (measured_at, bench_run, size_bytes)) as size_bytes
    from allreduce_bench
    where batch_size is not null
    group by all
),

sized as (
    select
        calls.*,
        coalesce(calls.collective_name, case when calls.category = 'allreduce' then 'allreduce' end) as collective,
        coalesce(calls.trace_bytes, case when calls.category = 'allreduce' then bench_sizes.size_bytes end) as size_bytes,
        case when calls.trace_bytes is not null then 'trace'
            when calls.category = 'allreduce' and bench_sizes.size_bytes is not null then 'bench' end as size_source,
        coalesce(calls.group_size, calls.world_size) as n
    from calls
    left join bench_sizes
        on bench_sizes.world_size = calls.world_size and bench_sizes.batch_size = calls.batch_size
),

grouped as (
    select
        -- size_source 'bench' when any call's size came from the bench; n: the ranks' group size (one per collective)
        run_id, batch_size, category, collective, size_bytes, min(size_source) as size_source, min(n) as n,
        count(*) as calls,
        median(transfer_ns) as transfer_p50_ns,
        quantile_cont(transfer_ns, 0.9) as transfer_p90_ns
    from sized
    group by all
),

floors as (
    select size_bytes, world_size,
        -- graph burst preferred, then the latest run (ties: the last bench_run name, then the lowest time)
        arg_max(kernel_median_us, (mode = 'graph', measured_at, bench_run, -kernel_median_us)) as kernel_us
    from allreduce_bench
    where mode in ('graph', 'eager') and kernel_median_us is not null
    group by all
)

select
    grouped.run_id,
    grouped.batch_size,
    grouped.category,
    grouped.collective,
    grouped.size_bytes,
    grouped.size_source,
    grouped.n as ranks,
    grouped.calls,
    round(grouped.transfer_p50_ns / 1e3, 2) as transfer_p50_us,
    round(grouped.transfer_p90_ns / 1e3, 2) as transfer_p90_us,
    round(grouped.size_bytes / nullif(grouped.transfer_p50_ns, 0), 3) as algbw_gbps,
    round(grouped.size_bytes / nullif(grouped.transfer_p50_ns, 0)
        * case when grouped.collective in ('allreduce', 'all_reduce') then 2.0 * (grouped.n - 1) / grouped.n
               when grouped.collective in ('all_gather', 'allgather', 'reduce_scatter', 'all_to_all', 'alltoall',
                                           '_allgather_base', '_reduce_scatter_base') then (grouped.n - 1) * 1.0 / grouped.n
               else 1.0 end, 3) as busbw_gbps,
    round(floors.kernel_us, 2) as bench_kernel_us,
    round(grouped.size_bytes / (floors.kernel_us * 1e3) * 2.0 * (grouped.n - 1) / grouped.n, 3) as bench_busbw_gbps,
    round(floors.kernel_us * 1e3 / nullif(grouped.transfer_p50_ns, 0), 4) as transfer_vs_bench
from grouped
left join floors
    on grouped.category = 'allreduce' and floors.size_bytes = grouped.size_bytes and floors.world_size = grouped.n
order by grouped.run_id, grouped.batch_size nulls first, grouped.category, grouped.collective, grouped.size_bytes
