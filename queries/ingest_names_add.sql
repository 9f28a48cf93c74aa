-- name: ingest_names_add
-- The GPU activity names a loaded file brought that were not in kernel_names yet.
-- creates: none (inserts into kernel_names)
-- reads: none
-- params: $names
-- grain: one row per new name
insert into kernel_names by name
select unnest($names::struct(name_id integer, name varchar, short_name varchar)[], recursive := true);
