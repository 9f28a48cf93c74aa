-- name: ingest_stage_unclassified
-- Whether any (name, kind, collective) key of a file's staged GPU activities (_stage_gpu) has no class yet in
-- kernel_classes. A file stored beside others cleans its GPU activities where it is read, before their classes
-- are written, only then (k25trace.ingest.loader.Loader.read); a file whose keys all have their class is cleaned
-- by its store, in its thread, with its other tables: cleaning removes rows, never a key, so no class changes.
-- creates: none
-- reads: _stage_gpu, kernel_classes
-- grain: one row
select exists (
    select 1
    from (select distinct name_id, kind, collective_name from _stage_gpu) as keys
    where not exists (
        select 1 from kernel_classes as known
        where known.name_id = keys.name_id
            and known.kind = keys.kind
            and known.collective_name is not distinct from keys.collective_name
    )
) as unclassified
