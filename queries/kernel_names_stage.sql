-- name: kernel_names_stage
-- Kernel names without a trace, for k25trace.classify.classify_names on a scratch in-memory database: the names
-- into kernel_names and one placeholder activity per (name, kind, collective) key into gpu_events (trace 0,
-- 1 ns long), so that kernel_classes.sql classifies them exactly as it classifies a trace.
-- creates: kernel_names (rows), gpu_events (rows of trace 0)
-- reads: none
-- params: $names, $keys
-- grain: kernel_names = one row per distinct name; gpu_events = one row per key
insert into kernel_names by name
select unnest($names::struct(name_id integer, name varchar, short_name varchar)[], recursive := true);

insert into gpu_events by name
select
    0 as trace_id,
    0 as start_ns,
    1 as dur_ns,
    1 as end_ns,
    unnest(
        $keys::struct(event_id bigint, kind varchar, name_id integer, collective_name varchar)[], recursive := true
    );
