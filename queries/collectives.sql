-- name: collectives
-- Pair the collectives of all ranks of a run and split their time into transfer and wait. Ranks of one run are
-- the traces of one capture level (or, outside captures, of one directory) with the same world size. Within a
-- step (same step_index on every rank: markers are emitted identically), the k-th collective of a category on
-- each rank is the same collective. Rank clocks differ: each rank's offset is the median, over its paired
-- collectives, of how much later its kernels end than the reference rank's (collectives end nearly together).
-- After alignment: transfer = the shortest duration across ranks; wait = a rank's duration minus transfer; the
-- late rank is the one whose kernel started last (ties: the shortest duration); the wait of the other ranks is
-- charged to it (caused_wait_ns). lateness_ns = how much later than the earliest rank a rank arrived. A wait at
-- the first collective of a step (step_ordinal 0, any category) is 'launch' wait (the ranks' hosts started the
-- step at different times: a slow host thread, a late graph replay); a wait at a later collective is 'gpu'
-- wait (the work on the GPU between two collectives took longer on the late rank). Traces whose steps were
-- inferred (no markers) pair their collectives over the whole trace (pair_step = -1; wait_kind 'unknown').
-- creates: trace_runs (table), _collective_calls (temp table, dropped at the end), rank_offsets (table), collectives (table),
--   comm_alignment (table: how much to trust the figures of each run, see below)
-- reads: traces, launches, gpu_events, steps
-- params: none
-- grain: trace_runs = one row per trace; rank_offsets = one row per trace in a multi-rank run; collectives = one row per paired collective per rank;
--   comm_alignment = one row per multi-rank run with collectives
-- trace_runs is THE definition of a run (every report and TUI query reads it): the traces of one capture level
-- (else of one directory) with the same world size. When two or more files of such a group claim the same rank
-- (two profiling sessions written into one directory), the group is split into sessions: the k-th file of each
-- rank, in order of its first event, goes to session k (run_id '…#ws2#s2'), and duplicate_of_rank says so.
-- What a run is called is defined here too, once, as columns (nothing parses run_id for it): run_name is the
-- capture directory's name, else the name of the folder the files came from; group_label is run_name with
-- '#<level>' for a capture level and ' (TP<world size>)' for a multi-rank run; session is k for the k-th session
-- of a group whose files claim the same rank (NULL otherwise); session_label says what tells the sessions apart:
-- 'graph' or 'eager' (the trace has cudaGraphLaunch/hipGraphLaunch calls, or none) when that alone does, else the
-- part of the file name the files of a rank do not share (vLLM's timestamp), after the mode when modes differ;
-- run_label is group_label with the session and its label, e.g. 'graph (TP2)', 'cap#c64 (TP8)',
-- 'both (TP2#s2 eager)'.
create or replace table trace_runs as
with base as (
    select
        trace_id,
        rank,
        world_size,
        file_name,
        coalesce(regexp_extract(capture_dir, '[^/]*$'),
                 regexp_extract(regexp_replace(path, '/[^/]*$', ''), '[^/]*$')) as run_name,
        coalesce(regexp_extract(capture_dir, '[^/]*$') || coalesce('#' || nullif(level, ''), ''),
                 regexp_extract(regexp_replace(path, '/[^/]*$', ''), '[^/]*$')) as label_name,
        coalesce(capture_dir || '#' || coalesce(level, ''), regexp_replace(path, '/[^/]*$', '')) || '#ws'
            || coalesce(world_size::varchar, '?') as base_run,
        row_number() over (partition by
            coalesce(capture_dir || '#' || coalesce(level, ''), regexp_replace(path, '/[^/]*$', '')),
            world_size, rank order by first_ns nulls last, trace_id) as session,
        -- the trace replays CUDA/HIP graphs (vLLM's CUDA-graph mode, full or piecewise), else it ran eager
        trace_id in (select trace_id from launches where name in ('cudaGraphLaunch', 'hipGraphLaunch', 'cuGraphLaunch'))
            as uses_graphs
    from traces
    where not is_frontend
),

sessions as (
    select *, max(session) over (partition by base_run) as sessions
    from base
),

-- What tells the sessions of a group apart, for their labels. Each file name of a duplicated rank is cut into
-- tokens (runs of characters other than . _ -, and those separators); the tokens that all files of that rank
-- share at the start and at the end are dropped, and the rest (e.g. vLLM's timestamp
-- 'dp0_pp0_tp0_dcp0_ep0_rank0.<ns>.pt.trace.json.gz') is the file's distinguishing part.
name_tokens as (
    select trace_id, base_run, rank, regexp_extract_all(file_name, '[^._-]+|[._-]') as tok,
        count(*) over (partition by base_run, rank) as files
    from sessions
    where sessions > 1
),

common_prefix as (  -- the most leading tokens every file of the rank shares
    select base_run, rank, max(i) as prefix_len
    from (
        select name_tokens.base_run, name_tokens.rank, i
        from name_tokens, unnest(range(0, len(name_tokens.tok) + 1)) as r(i)
        group by name_tokens.base_run, name_tokens.rank, i, name_tokens.files
        having count(*) = name_tokens.files and count(distinct list_slice(name_tokens.tok, 1, i)) = 1
    )
    group by all
),

common_suffix as (  -- the most trailing tokens every file of the rank shares
    select base_run, rank, max(i) as suffix_len
    from (
        select name_tokens.base_run, name_tokens.rank, i
        from name_tokens, unnest(range(0, len(name_tokens.tok) + 1)) as r(i)
        group by name_tokens.base_run, name_tokens.rank, i, name_tokens.files
        having count(*) = name_tokens.files
            and count(distinct list_slice(name_tokens.tok, len(name_tokens.tok) - i + 1, len(name_tokens.tok))) = 1
    )
    group by all
),

name_parts as (
    select name_tokens.trace_id,
        nullif(trim(array_to_string(list_slice(name_tokens.tok, common_prefix.prefix_len + 1,
            len(name_tokens.tok) - least(common_suffix.suffix_len,
                min(len(name_tokens.tok)) over (partition by name_tokens.base_run, name_tokens.rank)
                - common_prefix.prefix_len)), ''), '._-'), '') as name_part
    from name_tokens
    join common_prefix using (base_run, rank)
    join common_suffix using (base_run, rank)
),

session_modes as (  -- per session: CUDA graphs or eager, and the distinguishing file-name part of its lowest rank
    select sessions.base_run, sessions.session,
        case when bool_or(sessions.uses_graphs) then 'graph' else 'eager' end as mode,
        arg_min(name_parts.name_part, sessions.rank) as name_part
    from sessions
    left join name_parts using (trace_id)
    where sessions.sessions > 1
    group by all
),

session_labels as (
    -- graph / eager when that alone tells every session of the group apart; else the file-name part (after the
    -- mode when the modes differ at all); NULL when nothing tells them apart (then only #s<k> does)
    select base_run, session,
        case
            when count(distinct mode) over (partition by base_run) = count(*) over (partition by base_run) then mode
            else nullif(concat_ws(' ',
                case when count(distinct mode) over (partition by base_run) > 1 then mode end, name_part), '')
        end as session_label
    from session_modes
)

select
    trace_id,
    rank,
    world_size,
    case when sessions > 1 then base_run || '#s' || session else base_run end as run_id,
    sessions > 1 as duplicate_of_rank,   -- another file of the same directory/level claims this rank
    file_name,
    (case when sessions > 1 then session end)::integer as session,
    session_labels.session_label,
    run_name,
    label_name || case when world_size is null or world_size = 1 then '' else ' (TP' || world_size || ')' end as group_label,
    label_name || case when (world_size is null or world_size = 1) and sessions = 1 then ''
        else ' (TP' || coalesce(world_size::varchar, '?')
            || case when sessions > 1 then '#s' || session || coalesce(' ' || session_labels.session_label, '') else '' end
            || ')'
    end as run_label
from sessions
left join session_labels using (base_run, session)
order by trace_id;

create or replace temp table _collective_calls as
with trace_inferred as (
    select trace_id, bool_or(is_inferred) as inferred from steps group by trace_id
),

calls as (
    select
        trace_runs.run_id, gpu_events.trace_id, gpu_events.rank, gpu_events.event_id, gpu_events.step_index,
        -- steps inferred from idle gaps need not line up across ranks: pair such traces' collectives over the
        -- whole trace instead of per step
        case when coalesce(trace_inferred.inferred, true) then -1 else gpu_events.step_index end as pair_step,
        gpu_events.category, gpu_events.start_ns, gpu_events.end_ns, gpu_events.dur_ns
    from gpu_events
    join trace_runs using (trace_id)
    left join trace_inferred using (trace_id)
    where gpu_events.category in ('allreduce', 'all2all', 'comm_other')
        and (gpu_events.step_index is not null or coalesce(trace_inferred.inferred, true))
)

select
    *,
    row_number() over (partition by trace_id, pair_step, category order by start_ns, event_id) - 1 as ordinal,
    row_number() over (partition by trace_id, pair_step order by start_ns, event_id) - 1 as step_ordinal
from calls;

create or replace table rank_offsets as
with calls as (
    select * from _collective_calls
),

run_sizes as (
    select run_id, count(distinct rank) as ranks, min(rank) as reference_rank from trace_runs group by run_id having count(distinct rank) > 1
),

complete as (
    select calls.*
    from calls
    join run_sizes using (run_id)
    qualify count(distinct calls.rank) over (partition by calls.run_id, calls.pair_step, calls.category, calls.ordinal) = run_sizes.ranks
),

reference as (
    select complete.run_id, complete.pair_step, complete.category, complete.ordinal, complete.end_ns as reference_end_ns
    from complete
    join run_sizes using (run_id)
    where complete.rank = run_sizes.reference_rank
),

differences as (
    select complete.run_id, complete.trace_id, complete.rank, complete.end_ns - reference.reference_end_ns as end_difference_ns
    from complete
    join reference using (run_id, pair_step, category, ordinal)
)

select
    run_id,
    trace_id,
    rank,
    median(end_difference_ns)::bigint as offset_ns,
    count(*) as paired_collectives
from differences
group by all;

create or replace table collectives as
with calls as (
    select * from _collective_calls
),

aligned as (
    select
        calls.*,
        rank_offsets.offset_ns,
        calls.start_ns - rank_offsets.offset_ns as aligned_start_ns,
        calls.end_ns - rank_offsets.offset_ns as aligned_end_ns,
        count(*) over (partition by calls.run_id, calls.pair_step, calls.category, calls.ordinal) as ranks_present,
        (select count(distinct rank) from trace_runs where trace_runs.run_id = calls.run_id) as run_ranks
    from calls
    join rank_offsets using (run_id, trace_id)
),

paired as (
    select
        *,
        min(dur_ns) over collective as transfer_ns,
        max(aligned_start_ns) over collective - min(aligned_start_ns) over collective as skew_ns,
        aligned_end_ns - avg(aligned_end_ns) over collective as end_residual_ns,
        aligned_start_ns - min(aligned_start_ns) over collective as lateness_ns,
        -- the step's first collective on the reference (lowest) rank decides the wait kind for all ranks
        min(step_ordinal) over collective as first_step_ordinal,
        row_number() over (partition by run_id, pair_step, category, ordinal order by aligned_start_ns desc, dur_ns, rank) = 1 as is_late
    from aligned
    where ranks_present = run_ranks
    window collective as (partition by run_id, pair_step, category, ordinal)
),

waited as (
    select *, dur_ns - transfer_ns as wait_ns
    from paired
)

select
    run_id, step_index, pair_step, category, ordinal, step_ordinal, trace_id, rank, event_id,
    start_ns, end_ns, dur_ns, offset_ns, aligned_start_ns, aligned_end_ns,
    transfer_ns,
    wait_ns,
    is_late,
    skew_ns,
    end_residual_ns::bigint as end_residual_ns,
    lateness_ns,
    (case when is_late then sum(wait_ns) over (partition by run_id, pair_step, category, ordinal) - wait_ns else 0 end)::bigint
        as caused_wait_ns,
    case when pair_step < 0 then 'unknown' when first_step_ordinal = 0 then 'launch' else 'gpu' end as wait_kind
from waited
order by run_id, pair_step, category, ordinal, rank;

-- comm_alignment: how much to trust the cross-rank figures of each multi-rank run. The clock alignment's residuals
-- (aligned end minus the mean aligned end of each paired collective: paired collectives end together, so a large
-- residual means the clocks or the pairing are off) against the median transfer, and how many collective events
-- could not be paired (a rank has more or fewer of them in a step). alignment = 'good' when the p90 residual is at
-- most max(2 µs, 10 % of the median transfer) and every event paired; 'poor' otherwise; 'unpaired' when nothing
-- paired.
create or replace table comm_alignment as
with runs as (
    select run_id, count(distinct rank) as ranks from trace_runs group by run_id having count(distinct rank) > 1
),

observed as (  -- the collective events that could be paired (those in steps, or all when steps were inferred)
    select run_id, count(*) as collective_events
    from _collective_calls
    group by all
),

paired as (
    select run_id,
        count(*) as paired_events,
        quantile_cont(abs(end_residual_ns), 0.5) as residual_p50_ns,
        quantile_cont(abs(end_residual_ns), 0.9) as residual_p90_ns,
        max(abs(end_residual_ns)) as residual_max_ns,
        median(transfer_ns) as transfer_p50_ns
    from collectives
    group by all
)

select
    runs.run_id,
    runs.ranks,
    observed.collective_events,
    coalesce(paired.paired_events, 0) as paired_events,
    observed.collective_events - coalesce(paired.paired_events, 0) as unpaired_events,
    round(paired.residual_p50_ns / 1e3, 3) as residual_p50_us,
    round(paired.residual_p90_ns / 1e3, 3) as residual_p90_us,
    round(paired.residual_max_ns / 1e3, 3) as residual_max_us,
    round(paired.transfer_p50_ns / 1e3, 3) as transfer_p50_us,
    case
        when paired.paired_events is null then 'unpaired'
        when paired.residual_p90_ns <= greatest(2000, 0.1 * paired.transfer_p50_ns)
            and observed.collective_events = paired.paired_events then 'good'
        else 'poor'
    end as alignment
from runs
join observed using (run_id)
left join paired using (run_id)
order by runs.run_id;

drop table _collective_calls;
