-- name: meta_get
-- The database's meta facts whose key starts with $prefix.
-- reads: meta
-- params: $prefix
-- grain: one row per key
select key, value from meta where starts_with(key, $prefix) order by key
