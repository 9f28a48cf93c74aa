-- name: ingest_stage
-- The staging tables of one file's load (k25trace.ingest.loader): the decoded events land here chunk by chunk
-- (inserted by column name from Arrow tables), are cleaned (ingest_clean.sql) and moved into the final tables
-- (ingest_commit.sql) inside the file's transaction; ingest_stage_drop.sql drops them, whatever happened.
-- Times are still relative to the file's baseTimeNanoseconds here (ts_ns, dur_ns); GPU names are already ids.
-- creates: _stage_gpu, _stage_launch, _stage_ann, _stage_ops, _stage_py, _stage_dropped (temp tables)
-- reads: none
-- params: none
-- grain: _stage_<table> = one row per kept event of the file; _stage_dropped = one row per staged event removed
--   by ingest_clean.sql (its table and why)
create or replace temp table _stage_gpu (
    event_id bigint, kind varchar, name_id integer, device integer, stream bigint, ts_ns bigint, dur_ns bigint,
    correlation bigint, external_id bigint, grid_x integer, grid_y integer, grid_z integer,
    block_x integer, block_y integer, block_z integer, registers integer, shared_mem_bytes integer,
    blocks_per_sm double, warps_per_sm double, occupancy_pct double, bytes bigint, collective_name varchar,
    msg_in_nelems bigint, msg_out_nelems bigint, msg_dtype varchar, group_size integer, pg_name varchar,
    pg_ranks varchar
);

create or replace temp table _stage_launch (
    event_id bigint, api varchar, name varchar, pid bigint, tid bigint, ts_ns bigint, dur_ns bigint,
    correlation bigint, external_id bigint, cbid integer
);

create or replace temp table _stage_ann (
    event_id bigint, kind varchar, name varchar, pid bigint, tid bigint, ts_ns bigint, dur_ns bigint,
    external_id bigint
);

create or replace temp table _stage_ops (
    event_id bigint, name varchar, pid bigint, tid bigint, ts_ns bigint, dur_ns bigint, external_id bigint,
    input_dims varchar
);

create or replace temp table _stage_py (
    event_id bigint, name varchar, pid bigint, tid bigint, ts_ns bigint, dur_ns bigint
);

create or replace temp table _stage_dropped (staged varchar, problem varchar, event_id bigint);
