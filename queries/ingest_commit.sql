-- name: ingest_commit
-- Move one file's cleaned staged events (ingest_stage.sql, ingest_clean.sql) into the final event tables, by
-- column name: absolute times (start_ns = baseTimeNanoseconds + ts_ns; a GPU activity without dur lasts 0, as
-- does any event without one), the trace id and rank; each table in time order (start_ns, then file order).
-- gpu_events.category and step_index stay NULL here (k25trace.pipeline classifies and builds the steps next).
-- creates: none (inserts into gpu_events, launches, annotations, cpu_ops, python_functions)
-- reads: _stage_gpu, _stage_launch, _stage_ann, _stage_ops, _stage_py
-- params: $trace_id, $rank, $base
-- grain: one final row per staged row
insert into gpu_events by name
select
    $trace_id as trace_id, $rank as rank, event_id, kind, name_id, device, stream,
    $base + ts_ns as start_ns, coalesce(dur_ns, 0) as dur_ns, $base + ts_ns + coalesce(dur_ns, 0) as end_ns,
    correlation, external_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, registers, shared_mem_bytes,
    blocks_per_sm, warps_per_sm, occupancy_pct, bytes, collective_name, msg_in_nelems, msg_out_nelems, msg_dtype,
    group_size, pg_name, pg_ranks
from _stage_gpu
order by start_ns, event_id;

insert into launches by name
select
    $trace_id as trace_id, $rank as rank, event_id, api, name, pid, tid,
    $base + ts_ns as start_ns, coalesce(dur_ns, 0) as dur_ns, $base + ts_ns + coalesce(dur_ns, 0) as end_ns,
    correlation, external_id, cbid
from _stage_launch
order by start_ns, event_id;

insert into annotations by name
select
    $trace_id as trace_id, $rank as rank, event_id, kind, name, pid, tid,
    $base + ts_ns as start_ns, coalesce(dur_ns, 0) as dur_ns, $base + ts_ns + coalesce(dur_ns, 0) as end_ns,
    external_id
from _stage_ann
order by start_ns, event_id;

insert into cpu_ops by name
select
    $trace_id as trace_id, $rank as rank, event_id, name, pid, tid,
    $base + ts_ns as start_ns, coalesce(dur_ns, 0) as dur_ns, $base + ts_ns + coalesce(dur_ns, 0) as end_ns,
    external_id, input_dims
from _stage_ops
order by start_ns, event_id;

insert into python_functions by name
select
    $trace_id as trace_id, $rank as rank, event_id, name, pid, tid,
    $base + ts_ns as start_ns, coalesce(dur_ns, 0) as dur_ns, $base + ts_ns + coalesce(dur_ns, 0) as end_ns
from _stage_py
order by start_ns, event_id;
