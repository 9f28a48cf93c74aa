-- name: ingest_runs_stale
-- Mark the cross-rank run tables (trace_runs, rank_offsets, collectives) stale ($stale = 'true': a trace was
-- committed, or steps or classes changed, since they were last built) or fresh ('false': just rebuilt). Written
-- in the caller's transaction; k25trace.pipeline rebuilds stale ones when a database is next opened. Nothing is
-- written when the flag says so already: the transactions of files stored at once do not all write the same row.
-- creates: meta.crossrank_stale (one key)
-- reads: meta
-- params: $stale
-- grain: one row written
insert or replace into meta (key, value)
select 'crossrank_stale', $stale
where not exists (select 1 from meta where key = 'crossrank_stale' and value = $stale)
