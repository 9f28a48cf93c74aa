-- name: ingest_known
-- Is this content already loaded? The trace with this sha256 (files are identified by content, not by path).
-- creates: none
-- reads: traces
-- params: $sha256
-- grain: one row per trace with that hash (at most one)
select trace_id, path
from traces
where sha256 = $sha256;
