-- name: ingest_trace
-- The traces row of one loaded file, after its events were moved (ingest_commit.sql): what the loader learnt
-- from the file (passed in) and its time span over the stored events (GPU activities, launches, annotations,
-- CPU ops).
-- creates: none (inserts into traces)
-- reads: gpu_events, launches, annotations, cpu_ops
-- params: $trace_id, $path, $file_name, $file_size, $sha256, $rank, $world_size, $base_time_ns, $device_name, $device_count, $vllm_version, $is_frontend, $capture_dir, $level, $concurrency, $event_count, $gpu_event_count, $distributed_info, $device_properties, $metadata, $skipped, $loaded_at, $loader_version, $rank_source
-- grain: one row (the file)
insert into traces by name
with span as (
    select min(s) as first_ns, max(e) as last_ns from (
        select min(start_ns) as s, max(end_ns) as e from gpu_events where trace_id = $trace_id
        union all
        select min(start_ns), max(end_ns) from launches where trace_id = $trace_id
        union all
        select min(start_ns), max(end_ns) from annotations where trace_id = $trace_id
        union all
        select min(start_ns), max(end_ns) from cpu_ops where trace_id = $trace_id
    )
)
select
    $trace_id as trace_id, $path as path, $file_name as file_name, $file_size as file_size, $sha256 as sha256,
    $rank as rank, $world_size as world_size, $base_time_ns as base_time_ns, $device_name as device_name,
    $device_count as device_count, $vllm_version as vllm_version, $is_frontend as is_frontend,
    $capture_dir as capture_dir, $level as level, $concurrency as concurrency, $event_count as event_count,
    $gpu_event_count as gpu_event_count, span.first_ns, span.last_ns, $distributed_info as distributed_info,
    $device_properties as device_properties, $metadata as metadata, $skipped as skipped, $loaded_at as loaded_at,
    $loader_version as loader_version, $rank_source as rank_source
from span;
