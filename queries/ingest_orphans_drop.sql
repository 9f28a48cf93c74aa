-- name: ingest_orphans_drop
-- After a load that stored files at once: remove what a file whose store failed had written first and no trace
-- uses (k25trace.ingest.loader.StoreThreads): the classes of its kernel keys ($name_ids) that no GPU activity has,
-- the kernel names it brought ($new_name_ids) that none has, its capture's rows where no trace is of that capture.
-- creates: kernel_classes, kernel_names, captures, capture_levels (rows removed)
-- reads: gpu_events, traces
-- params: $name_ids, $new_name_ids, $capture_key, $trace_capture_dir
-- grain: no rows returned
delete from kernel_classes as k
where list_contains($name_ids, k.name_id)
    and not exists (
        select 1 from gpu_events as g
        where g.name_id = k.name_id and g.kind = k.kind and g.collective_name is not distinct from k.collective_name
    );

delete from kernel_names as n
where list_contains($new_name_ids, n.name_id)
    and not exists (select 1 from gpu_events as g where g.name_id = n.name_id);

delete from capture_levels
where capture_dir = $capture_key
    and not exists (select 1 from traces where traces.capture_dir = $trace_capture_dir);

delete from captures
where capture_dir = $capture_key
    and not exists (select 1 from traces where traces.capture_dir = $trace_capture_dir)
