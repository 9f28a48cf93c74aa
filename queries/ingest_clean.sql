-- name: ingest_clean
-- Before one file's staged events move into the final tables: remove the rows whose absolute times would not fit
-- in a 64-bit integer ns (problem 'bad_time'; the decoder already dropped what is no time on its own), and exact
-- duplicate events: every stored column but event_id equal (problem 'duplicate'; the first in file order is
-- kept). Whole rows are compared only when a few probe columns may repeat (their hash does: equal columns have
-- equal hashes, a collision only costs the window), so a file without duplicates costs one distinct count of a
-- hash per table (the probe) and no window. python_function rows are not de-duplicated: their ids
-- (Python id, parent id) are not stored, so two real zero-length calls in the same µs would look alike. Each row
-- to remove is listed in _stage_dropped (read by ingest_dropped.sql); the loader filters its staged tables (Arrow,
-- read-only here) by that list before ingest_commit.sql.
-- creates: none (inserts into _stage_dropped)
-- reads: _stage_gpu, _stage_launch, _stage_ann, _stage_ops, _stage_py
-- params: $base
-- grain: none
insert into _stage_dropped
select 'gpu', 'bad_time', event_id from _stage_gpu
where not ($base::hugeint + ts_ns between -9223372036854775808 and 9223372036854775807
    and $base::hugeint + ts_ns + coalesce(dur_ns, 0) <= 9223372036854775807);

insert into _stage_dropped
select 'gpu', 'duplicate', event_id from (
    select event_id, row_number() over (
        partition by kind, name_id, device, stream, ts_ns, dur_ns, correlation, external_id, grid_x, grid_y, grid_z, block_x,
        block_y, block_z, registers, shared_mem_bytes, blocks_per_sm, warps_per_sm, occupancy_pct,
        bytes, collective_name, msg_in_nelems, msg_out_nelems, msg_dtype, group_size, pg_name, pg_ranks
        order by event_id) as copy
    from _stage_gpu
    where event_id not in (select event_id from _stage_dropped where staged = 'gpu')
        and (select count(*) <> count(distinct hash(ts_ns, dur_ns, device, stream, correlation)) from _stage_gpu)  -- the cheap probe
)
where copy > 1;

insert into _stage_dropped
select 'launch', 'bad_time', event_id from _stage_launch
where not ($base::hugeint + ts_ns between -9223372036854775808 and 9223372036854775807
    and $base::hugeint + ts_ns + coalesce(dur_ns, 0) <= 9223372036854775807);

insert into _stage_dropped
select 'launch', 'duplicate', event_id from (
    select event_id, row_number() over (
        partition by api, name, pid, tid, ts_ns, dur_ns, correlation, external_id, cbid
        order by event_id) as copy
    from _stage_launch
    where event_id not in (select event_id from _stage_dropped where staged = 'launch')
        and (select count(*) <> count(distinct hash(ts_ns, dur_ns, tid, correlation)) from _stage_launch)  -- the cheap probe
)
where copy > 1;

insert into _stage_dropped
select 'ann', 'bad_time', event_id from _stage_ann
where not ($base::hugeint + ts_ns between -9223372036854775808 and 9223372036854775807
    and $base::hugeint + ts_ns + coalesce(dur_ns, 0) <= 9223372036854775807);

insert into _stage_dropped
select 'ann', 'duplicate', event_id from (
    select event_id, row_number() over (
        partition by kind, name, pid, tid, ts_ns, dur_ns, external_id
        order by event_id) as copy
    from _stage_ann
    where event_id not in (select event_id from _stage_dropped where staged = 'ann')
        and (select count(*) <> count(distinct hash(ts_ns, dur_ns, tid, external_id, name)) from _stage_ann)  -- the cheap probe
)
where copy > 1;

insert into _stage_dropped
select 'ops', 'bad_time', event_id from _stage_ops
where not ($base::hugeint + ts_ns between -9223372036854775808 and 9223372036854775807
    and $base::hugeint + ts_ns + coalesce(dur_ns, 0) <= 9223372036854775807);

insert into _stage_dropped
select 'ops', 'duplicate', event_id from (
    select event_id, row_number() over (
        partition by name, pid, tid, ts_ns, dur_ns, external_id, input_dims
        order by event_id) as copy
    from _stage_ops
    where event_id not in (select event_id from _stage_dropped where staged = 'ops')
        and (select count(*) <> count(distinct hash(ts_ns, dur_ns, tid, external_id)) from _stage_ops)  -- the cheap probe
)
where copy > 1;

insert into _stage_dropped
select 'py', 'bad_time', event_id from _stage_py
where not ($base::hugeint + ts_ns between -9223372036854775808 and 9223372036854775807
    and $base::hugeint + ts_ns + coalesce(dur_ns, 0) <= 9223372036854775807);

