-- name: settings_lock
-- The read-only guard of ad-hoc SQL: no file or network access at all, and the configuration locked so that the
-- SQL cannot turn it back on (k25trace.db.forbid_external_access; it holds for every cursor of the connection).
-- reads: none
-- params: none
-- grain: no rows (two settings changed)
set enable_external_access = false;

set lock_configuration = true
