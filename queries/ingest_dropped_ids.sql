-- name: ingest_dropped_ids
-- The event ids ingest_clean.sql listed for removal from one staged table (the loader filters them out of its
-- Arrow table before ingest_commit.sql).
-- creates: none
-- reads: _stage_dropped
-- params: $staged
-- grain: one row per staged event to remove
select event_id from _stage_dropped where staged = $staged;
