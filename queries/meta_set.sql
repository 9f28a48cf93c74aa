-- name: meta_set
-- Set one key of the database's meta facts (insert or replace).
-- reads: meta
-- params: $key, $value
-- grain: one row written
insert or replace into meta (key, value) values ($key, $value)
