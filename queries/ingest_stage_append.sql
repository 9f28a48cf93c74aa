-- name: ingest_stage_append
-- Append a batch of decoded chunks to one file's staging tables (ingest_stage.sql), by column name. _chunk_gpu,
-- _chunk_launch, _chunk_ann, _chunk_ops and _chunk_py are Arrow tables the loader registers (empty ones for the
-- tables a batch has no rows for).
-- creates: none (inserts into _stage_gpu, _stage_launch, _stage_ann, _stage_ops, _stage_py)
-- reads: _chunk_gpu, _chunk_launch, _chunk_ann, _chunk_ops, _chunk_py
-- params: none
-- grain: one staged row per decoded event kept
insert into _stage_gpu by name select * from _chunk_gpu;

insert into _stage_launch by name select * from _chunk_launch;

insert into _stage_ann by name select * from _chunk_ann;

insert into _stage_ops by name select * from _chunk_ops;

insert into _stage_py by name select * from _chunk_py;
