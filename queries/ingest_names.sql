-- name: ingest_names
-- The kernel names already in the database, with their ids (the loader maps each new file's GPU names to ids).
-- creates: none
-- reads: kernel_names
-- params: none
-- grain: one row per kernel name
select name, name_id
from kernel_names
order by name_id;
