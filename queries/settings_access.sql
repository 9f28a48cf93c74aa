-- name: settings_access
-- Whether the connection's configuration is locked and whether it may touch files (external access), for the
-- read-only guard of ad-hoc SQL (k25trace.db.forbid_external_access).
-- reads: current_setting()
-- params: none
-- grain: one row
select
    current_setting('lock_configuration') as locked,
    current_setting('enable_external_access') as external_access
