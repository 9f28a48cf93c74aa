-- name: ingest_stage_drop
-- Drop one file's staging tables (ingest_stage.sql), after its commit or its rollback.
-- creates: none (drops _stage_gpu, _stage_launch, _stage_ann, _stage_ops, _stage_py, _stage_dropped)
-- reads: none
-- params: none
-- grain: none
drop table if exists _stage_gpu;

drop table if exists _stage_launch;

drop table if exists _stage_ann;

drop table if exists _stage_ops;

drop table if exists _stage_py;

drop table if exists _stage_dropped;
