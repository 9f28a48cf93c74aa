-- name: step_markers
-- Find the engine-step markers of one trace and parse them: vLLM `execute_…` user annotations in every known
-- form (execute_new_N_cached_M; execute_context_N(T)_generation_M(U) with a possibly non-integer token field;
-- the detailed execute_T_context_N(sq…)_generation_M(sq…)), else SGLang `step[DECODE bs=N]`, else their
-- gpu_user_annotation copies, else steps inferred from GPU idle gaps longer than $gap_ns.
-- creates: _step_markers (temp table; read by step_assign.sql and steps_build.sql, which drops it)
-- reads: annotations, gpu_events
-- params: $trace_id, $gap_ns
-- grain: one row per engine step of the trace
create or replace temp table _step_markers as
with step_annotations as (
    select
        kind, name, start_ns, end_ns, pid, tid,
        case when regexp_matches(name, '^execute_') then 'vllm' else 'sglang' end as family
    from annotations
    where trace_id = $trace_id
        and (regexp_matches(name, '^execute_(new_[0-9]+_cached_[0-9]+|context_[0-9]+\(|[0-9]+_context_[0-9]+\()')
            or regexp_matches(name, '^step\[[A-Za-z]+'))
),

cpu_markers as (
    select * from step_annotations where kind = 'user_annotation'
),

cpu_family as (
    -- vLLM markers win over SGLang ones (SGLang traces can carry both for the same step)
    select family from cpu_markers group by family order by (family = 'vllm') desc limit 1
),

gpu_copies as (
    select * from step_annotations where kind = 'gpu_user_annotation'
),

gpu_stream as (
    -- the GPU copies exist per stream: take the stream that carries the most of them
    select pid, tid from gpu_copies group by pid, tid order by count(*) desc, pid, tid limit 1
),

annotated as (
    select cpu_markers.name, start_ns, end_ns, cpu_markers.family as source, 'launch' as match_on
    from cpu_markers join cpu_family using (family)
    union all
    select gpu_copies.name, start_ns, end_ns, 'gpu_annotation', 'gpu'
    from gpu_copies join gpu_stream using (pid, tid)
    where not exists (select 1 from cpu_markers)
),

gpu_activity as (
    select
        start_ns, end_ns,
        max(end_ns) over (order by start_ns, end_ns rows between unbounded preceding and 1 preceding) as prev_end_ns
    from gpu_events
    where trace_id = $trace_id
        and not exists (select 1 from annotated)
),

gpu_groups as (
    select
        start_ns, end_ns,
        sum(case when prev_end_ns is null or start_ns - prev_end_ns > $gap_ns then 1 else 0 end)
            over (order by start_ns, end_ns rows unbounded preceding) as grp
    from gpu_activity
),

inferred as (
    select null::varchar as name, min(start_ns) as start_ns, max(end_ns) as end_ns, 'inferred' as source, 'gpu' as match_on
    from gpu_groups
    group by grp
),

markers as (
    select * from annotated
    union all
    select * from inferred
),

ordered as (
    select
        *,
        (row_number() over (order by start_ns, end_ns) - 1)::integer as step_index,
        lead(start_ns) over (order by start_ns, end_ns) as next_start_ns
    from markers
),

parsed as (
    select
        *,
        regexp_extract(name, '^execute_context_([0-9]+)\(([^)]*)\)_generation_([0-9]+)\(([^)]*)\)', ['cr', 'ct', 'gr', 'gt']) as native,
        regexp_extract(name, '^execute_([0-9]+)_context_([0-9]+)\(sq([0-9]+)[^)]*\)_generation_([0-9]+)\(sq([0-9]+)[^)]*\)', ['tt', 'cr', 'ct', 'gr', 'gt']) as detailed,
        regexp_extract(name, '^execute_new_([0-9]+)_cached_([0-9]+)', ['n', 'c']) as legacy,
        regexp_extract(name, '^step\[([A-Za-z]+)[^\]]*?bs=([0-9]+)', ['mode', 'bs']) as sglang
    from ordered
),

fields as (
    select
        step_index, name, source, match_on, start_ns, end_ns, next_start_ns,
        coalesce(
            nullif(native.cr, '')::integer, nullif(detailed.cr, '')::integer, nullif(legacy.n, '')::integer,
            case when upper(sglang.mode) in ('PREFILL', 'EXTEND') then nullif(sglang.bs, '')::integer
                 when upper(sglang.mode) = 'DECODE' then 0 end
        ) as ctx_reqs,
        coalesce(nullif(regexp_extract(native.ct, '^([0-9]+)', 1), '')::bigint, nullif(detailed.ct, '')::bigint) as ctx_tokens,
        coalesce(
            nullif(native.gr, '')::integer, nullif(detailed.gr, '')::integer, nullif(legacy.c, '')::integer,
            case when upper(sglang.mode) = 'DECODE' then nullif(sglang.bs, '')::integer
                 when upper(sglang.mode) in ('PREFILL', 'EXTEND') then 0 end
        ) as gen_reqs,
        coalesce(nullif(regexp_extract(native.gt, '^([0-9]+)', 1), '')::bigint, nullif(detailed.gt, '')::bigint) as gen_tokens,
        nullif(detailed.tt, '')::bigint as detailed_total_tokens,
        upper(sglang.mode) as sglang_mode
    from parsed
),

final as (
    select
        step_index,
        name as marker,
        source,
        source = 'inferred' as is_inferred,
        match_on,
        case
            when source = 'inferred' then 'unknown'
            when sglang_mode = 'MIXED' then 'mixed'
            when ctx_reqs is null or gen_reqs is null then 'unknown'
            when ctx_reqs = 0 and gen_reqs = 0 then 'empty'
            when ctx_reqs = 0 then 'decode'
            when gen_reqs = 0 then 'prefill'
            else 'mixed'
        end as phase,
        ctx_reqs,
        ctx_tokens,
        gen_reqs,
        gen_tokens,
        coalesce(detailed_total_tokens, ctx_tokens + gen_tokens) as total_tokens,
        ctx_reqs + gen_reqs as batch_size,
        gen_tokens > gen_reqs as is_spec_decode,
        case when source = 'inferred' then null else start_ns end as marker_start_ns,
        case when source = 'inferred' then null else end_ns end as marker_end_ns,
        start_ns as window_start_ns,
        -- a launch belongs to the latest marker that started at or before it, up to the next marker; the last
        -- marker keeps launches up to its own length again after it closed (sampling runs after the marker)
        coalesce(next_start_ns, end_ns + greatest(end_ns - start_ns, 5000000)) as window_end_ns
    from fields
)

select * from final
