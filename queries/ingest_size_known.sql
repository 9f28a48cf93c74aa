-- name: ingest_size_known
-- Could a file of this many bytes be loaded already? True when a trace of that file_size is stored: only then is
-- the file hashed before it is read (files with the same content have the same size; the sha256 of any other file
-- comes from its read).
-- creates: none
-- reads: traces
-- params: $file_size
-- grain: one row
select exists (select 1 from traces where file_size = $file_size) as known
