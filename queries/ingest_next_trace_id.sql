-- name: ingest_next_trace_id
-- The id of the next loaded trace.
-- creates: none
-- reads: trace_id_seq
-- params: none
-- grain: one row
select nextval('trace_id_seq') as trace_id;
