-- name: floor_bench_insert
-- Add one result row of `k25trace bench allreduce` (or of an imported --save-json file) to allreduce_bench, by
-- column name (k25trace.floor.write_rows runs it once per row, in one transaction).
-- reads: none
-- params: $bench_run, $measured_at, $backend, $world_size, $device_name, $torch_version, $dtype, $size_bytes, $batch_size, $size_source, $mode, $count, $reps, $median_us, $p90_us, $burst_ms, $algbw_gbps, $busbw_gbps, $kernel_median_us, $kernel_p90_us
-- grain: one row written
insert into allreduce_bench by name
select
    $bench_run::varchar as bench_run,
    $measured_at::timestamp as measured_at,
    $backend::varchar as backend,
    $world_size::integer as world_size,
    $device_name::varchar as device_name,
    $torch_version::varchar as torch_version,
    $dtype::varchar as dtype,
    $size_bytes::bigint as size_bytes,
    $batch_size::integer as batch_size,
    $size_source::varchar as size_source,
    $mode::varchar as mode,
    $count::integer as count,
    $reps::integer as reps,
    $median_us::double as median_us,
    $p90_us::double as p90_us,
    $burst_ms::double as burst_ms,
    $algbw_gbps::double as algbw_gbps,
    $busbw_gbps::double as busbw_gbps,
    $kernel_median_us::double as kernel_median_us,
    $kernel_p90_us::double as kernel_p90_us
