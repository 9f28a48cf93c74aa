-- name: schema
-- The public schema of a k25trace database (see README "Schema"). Idempotent: creates what is missing.
-- creates: meta, dtype_bytes (macro), traces, kernel_names, kernel_rules, kernel_classes, gpu_events, launches, annotations, cpu_ops, python_functions, captures, capture_levels, steps, step_categories, phase_steps (table macro), selected_steps (table macro), gpu_gaps, trace_runs, run_labels (view), rank_offsets, collectives, phase_collectives (table macro), comm_alignment, collective_causes, allreduce_bench, kernels (view), step_layers, step_layer_categories, op_calls, graph_kernels, step_idle
-- reads: none
-- params: none
-- grain: traces = one row per loaded trace file; gpu_events = one row per GPU activity; launches = one row per CUDA runtime/driver call; annotations = one row per user annotation; cpu_ops = one row per CPU operator
create table if not exists meta (
    key varchar primary key,
    value varchar
);

insert or ignore into meta by name select 'schema_version' as key, '8' as value;  -- k25trace.db.SCHEMA_VERSION

-- bytes per element of a collective's `dtype` arg (NCCL/torch spellings); NULL when unknown
create or replace macro dtype_bytes(dtype) as
    case lower(dtype)
        when 'bfloat16' then 2 when 'half' then 2 when 'float16' then 2
        when 'float' then 4 when 'float32' then 4 when 'int' then 4 when 'int32' then 4
        when 'double' then 8 when 'float64' then 8 when 'long' then 8 when 'int64' then 8
        when 'byte' then 1 when 'char' then 1 when 'uint8' then 1 when 'int8' then 1
        else case when lower(dtype) like 'float8%' then 1 end
    end;

create sequence if not exists trace_id_seq start 1;

create table if not exists traces (
    trace_id integer primary key,
    path varchar not null,            -- absolute path of the file as loaded
    file_name varchar not null,
    file_size bigint not null,        -- bytes on disk (compressed size for .gz)
    sha256 varchar not null unique,   -- content hash of the bytes loaded (the file as read): loading it again is a no-op
    rank integer,                     -- distributedInfo.rank, else the file name's rank{N}, else 0 (see rank_source)
    world_size integer,               -- distributedInfo.world_size; 1 for a single-process trace; NULL if unknown
    base_time_ns bigint not null,     -- baseTimeNanoseconds (0 when absent)
    device_name varchar,              -- deviceProperties[device].name of the GPU this rank used
    device_count integer,             -- entries in deviceProperties
    vllm_version varchar,             -- vllm_version metadata (vLLM 0.28+), else NULL
    is_frontend boolean not null,     -- an API-server (*.async_llm.*) CPU-only trace
    capture_dir varchar,              -- the `k25trace capture` directory it came from, if any
    level varchar,                    -- capture level name (e.g. 'c64'), if any
    concurrency integer,              -- requests in flight during that level, if known
    event_count bigint not null,      -- every entry of traceEvents
    gpu_event_count bigint not null,  -- rows in gpu_events for this trace
    first_ns bigint,                  -- earliest stored event start (absolute ns)
    last_ns bigint,                   -- latest stored event end (absolute ns)
    distributed_info json,
    device_properties json,
    metadata json,                    -- other top-level keys (schemaVersion, trace_id, cuda versions, …)
    skipped json,                     -- {category: count} of events not stored (ac2g flows, python_function, …)
    loaded_at timestamp not null,
    loader_version varchar not null,
    rank_source varchar               -- where rank came from: 'distributedInfo' | 'file_name' | 'default' (rank 0 of 1)
);

-- databases made before rank_source existed
alter table traces add column if not exists rank_source varchar;

create table if not exists kernel_names (
    name_id integer primary key,
    name varchar not null unique,     -- full demangled name as in the trace (can be several KB)
    short_name varchar not null       -- readable name: no return type, template args or argument list
);

create table if not exists kernel_rules (
    rule_id integer primary key,      -- matching order: the first rule that matches wins
    category varchar not null,
    kind varchar,                     -- NULL = any; else 'kernel' | 'memcpy' | 'memset'
    name_pattern varchar,             -- RE2 regex searched in the full kernel name; NULL = any
    collective_pattern varchar,       -- RE2 regex searched in the NCCL `Collective name` arg; NULL = any
    note varchar,
    source varchar                    -- 'builtin' or 'user:<file>'
);

create table if not exists kernel_classes (
    name_id integer not null,
    kind varchar not null,
    collective_name varchar,
    category varchar not null,        -- 'other' when no rule matched
    rule_id integer,                  -- -> kernel_rules; NULL when no rule matched
    rule_source varchar
);

create table if not exists gpu_events (
    trace_id integer not null,
    rank integer,
    event_id bigint not null,         -- position in the trace file's traceEvents array
    kind varchar not null,            -- 'kernel' | 'memcpy' | 'memset'
    name_id integer not null,         -- -> kernel_names
    device integer,                   -- GPU index (pid of the event)
    stream bigint,                    -- CUDA/HIP stream (tid of the event)
    start_ns bigint not null,         -- absolute: baseTimeNanoseconds + ts*1000
    dur_ns bigint not null,
    end_ns bigint not null,
    correlation bigint,               -- = the launching runtime/driver call's correlation (graph kernels share the cudaGraphLaunch's)
    external_id bigint,
    grid_x integer, grid_y integer, grid_z integer,
    block_x integer, block_y integer, block_z integer,
    registers integer,                -- registers per thread
    shared_mem_bytes integer,
    blocks_per_sm double,
    warps_per_sm double,
    occupancy_pct double,             -- est. achieved occupancy %
    bytes bigint,                     -- memcpy/memset size
    collective_name varchar,          -- NCCL args: Collective name
    msg_in_nelems bigint,             -- In msg nelems
    msg_out_nelems bigint,            -- Out msg nelems
    msg_dtype varchar,                -- dtype
    group_size integer,               -- Group size
    pg_name varchar,                  -- Process Group Name
    pg_ranks varchar,                 -- Process Group Ranks
    category varchar,                 -- kernel class (k25trace classify); NULL until classified
    step_index integer                -- engine step (k25trace steps); NULL = outside any step
);

create table if not exists launches (
    trace_id integer not null,
    rank integer,
    event_id bigint not null,
    api varchar not null,             -- 'cuda_runtime' | 'cuda_driver'
    name varchar not null,            -- cudaLaunchKernel, cudaGraphLaunch, cuLaunchKernel, hipGraphLaunch, …
    pid bigint, tid bigint,
    start_ns bigint not null, dur_ns bigint not null, end_ns bigint not null,
    correlation bigint,
    external_id bigint,
    cbid integer
);

create table if not exists annotations (
    trace_id integer not null,
    rank integer,
    event_id bigint not null,
    kind varchar not null,            -- 'user_annotation' (CPU) | 'gpu_user_annotation' (GPU copy, per stream)
    name varchar not null,
    pid bigint, tid bigint,           -- for gpu_user_annotation: device and stream
    start_ns bigint not null, dur_ns bigint not null, end_ns bigint not null,
    external_id bigint
);

create table if not exists cpu_ops (
    trace_id integer not null,
    rank integer,
    event_id bigint not null,
    name varchar not null,
    pid bigint, tid bigint,
    start_ns bigint not null, dur_ns bigint not null, end_ns bigint not null,
    external_id bigint,
    input_dims varchar                -- JSON text of args."Input Dims" when record_shapes was on
);

create table if not exists python_functions (
    trace_id integer not null,
    rank integer,
    event_id bigint not null,
    name varchar not null,
    pid bigint, tid bigint,
    start_ns bigint not null, dur_ns bigint not null, end_ns bigint not null
);

create table if not exists captures (
    capture_dir varchar primary key,  -- absolute path of a `k25trace capture` output directory
    manifest json not null            -- its manifest.json as written by capture
);

create table if not exists capture_levels (
    capture_dir varchar not null,
    level varchar not null,           -- level name, e.g. 'c64'
    concurrency integer,
    requests integer, errors integer,
    output_tokens bigint,
    duration_s double,
    output_tok_s double,
    ttft_p50_ms double, ttft_p90_ms double, ttft_p99_ms double,
    tpot_p50_ms double, tpot_p90_ms double, tpot_p99_ms double,
    itl_p50_ms double, itl_p90_ms double, itl_p99_ms double,
    primary key (capture_dir, level)
);

create or replace view kernels as
select
    g.trace_id, g.rank, g.event_id, g.kind, g.name_id, n.name, n.short_name, g.category, g.step_index,
    g.device, g.stream, g.start_ns, g.end_ns, g.dur_ns, g.correlation, g.external_id,
    g.grid_x, g.grid_y, g.grid_z, g.block_x, g.block_y, g.block_z,
    g.registers, g.shared_mem_bytes, g.blocks_per_sm, g.warps_per_sm, g.occupancy_pct, g.bytes,
    g.collective_name, g.msg_in_nelems, g.msg_out_nelems, g.msg_dtype, g.group_size, g.pg_name, g.pg_ranks
from gpu_events as g
join kernel_names as n using (name_id);

create table if not exists steps (
    trace_id integer not null,
    rank integer,
    step_index integer not null,      -- 0, 1, … in time order per trace (rank)
    marker varchar,                   -- the step marker's name (NULL for inferred steps)
    source varchar not null,          -- 'vllm' | 'sglang' | 'gpu_annotation' | 'inferred'
    is_inferred boolean not null,     -- no marker: split from GPU idle gaps
    phase varchar not null,           -- 'decode' | 'prefill' | 'mixed' | 'empty' | 'unknown'
    ctx_reqs integer,                 -- context (prefill) requests in the step
    ctx_tokens bigint,                -- their tokens (leading integer of the marker's token field)
    gen_reqs integer,                 -- generation (decode) requests
    gen_tokens bigint,                -- their tokens (> gen_reqs with speculative decoding)
    total_tokens bigint,              -- detailed markers' total, else ctx_tokens + gen_tokens
    batch_size integer,               -- requests in the step (ctx_reqs + gen_reqs)
    is_spec_decode boolean,           -- gen_tokens > gen_reqs
    is_empty boolean not null,        -- no GPU work, or a context_0(0)_generation_0(0) dummy
    marker_start_ns bigint,           -- CPU marker span (absolute ns)
    marker_end_ns bigint,
    graph_launches integer,           -- cudaGraphLaunch/hipGraphLaunch calls attributed to the step
    gpu_start_ns bigint,              -- first GPU activity start
    gpu_end_ns bigint,                -- last GPU activity end
    wall_ns bigint,                   -- gpu_end_ns - gpu_start_ns (0 when empty)
    busy_ns bigint,                   -- union of GPU activity intervals over all streams
    idle_ns bigint,                   -- wall_ns - busy_ns
    overlap_ns bigint,                -- time two or more categories ran at once
    kernel_count integer,             -- GPU activities (kernels, memcpys, memsets) in the step
    kernel_ns bigint,                 -- their summed durations
    far_activities integer,           -- activities launched in the step's window but timestamped more than 1 s outside
                                      -- the trace's CPU-side span: kept out of the step (step_index NULL)
    primary key (trace_id, step_index)
);

-- databases made before far_activities existed
alter table steps add column if not exists far_activities integer;

create table if not exists step_categories (
    trace_id integer not null,
    rank integer,
    step_index integer not null,
    category varchar not null,
    kernel_ns bigint not null,        -- summed durations of the category's activities
    busy_ns bigint not null,          -- exclusive: time when this category alone was running
    kernel_count integer not null,
    primary key (trace_id, step_index, category)
);

-- The steps of a phase filter, one definition for every report and TUI query: phase `of_phase` ('all': any), rank
-- `of_rank`, trace `of_trace_id`, batch size `of_batch_size` and run `of_run_id` (trace_runs.run_id, else the
-- trace's path as the reports name a trace without a run) (NULL: any; the last two by name, `of_batch_size :=
-- $batch_size`), empty steps included (the per-step listings show them).
create or replace macro phase_steps(of_phase, of_rank, of_trace_id, of_batch_size := null,
                                    of_run_id := null) as table
select *
from steps
where (of_phase = 'all' or steps.phase = of_phase)
    and (of_rank is null or steps.rank = of_rank)
    and (of_trace_id is null or steps.trace_id = of_trace_id)
    and (of_batch_size is null or steps.batch_size = of_batch_size)
    and (of_run_id is null or steps.trace_id in (
        select traces.trace_id
        from traces
        left join trace_runs using (trace_id)
        where coalesce(trace_runs.run_id, traces.path) = of_run_id
    ));

-- The steps a breakdown reads: those of phase_steps with GPU work (empty steps left out).
create or replace macro selected_steps(of_phase, of_rank, of_trace_id, of_batch_size := null,
                                       of_run_id := null) as table
select *
from phase_steps(of_phase, of_rank, of_trace_id, of_batch_size := of_batch_size, of_run_id := of_run_id)
where not is_empty;

create table if not exists trace_runs (
    trace_id integer,
    rank integer,
    world_size integer,
    run_id varchar,                   -- the ranks of one job: capture dir + level, else the file's directory, + world size
                                      -- (+ '#s<k>' when files of that group claim the same rank: session k)
    duplicate_of_rank boolean,        -- another file of the same directory/level claims this trace's rank
    file_name varchar,
    session integer,                  -- k for the k-th session of a group whose files claim the same rank; else NULL
    session_label varchar,            -- what tells that session apart: 'graph' | 'eager' (cudaGraphLaunch calls or
                                      -- none), else the file name's distinguishing part; NULL outside sessions
    run_name varchar,                 -- the capture directory's name, else the name of the folder the file came from
    group_label varchar,              -- run_name + '#<level>' (capture level) + ' (TP<world size>)' (multi-rank run)
    run_label varchar                 -- the run's name as reports print it: group_label with the session,
                                      -- e.g. 'graph (TP2)', 'cap#c64 (TP8)', 'both (TP2#s2 eager)'
);

-- databases made before trace_runs had sessions, then labels (collectives.sql rebuilds the table with them; a
-- database of an older schema version is upgraded, which rebuilds it)
alter table trace_runs add column if not exists duplicate_of_rank boolean;
alter table trace_runs add column if not exists file_name varchar;
alter table trace_runs add column if not exists session integer;
alter table trace_runs add column if not exists run_name varchar;
alter table trace_runs add column if not exists group_label varchar;
alter table trace_runs add column if not exists run_label varchar;
alter table trace_runs add column if not exists session_label varchar;

-- The name of each run as reports, warnings and the TUI print it, one row per run: the label columns of
-- trace_runs (collectives.sql defines them; nothing parses run_id for them).
create or replace view run_labels as
select distinct run_id, run_name, session, session_label, group_label, run_label
from trace_runs;

create table if not exists rank_offsets (
    run_id varchar,
    trace_id integer,
    rank integer,
    offset_ns bigint,                 -- this rank's clock minus the reference (lowest) rank's, from paired collective ends
    paired_collectives bigint
);

create table if not exists collectives (
    run_id varchar,
    step_index integer,
    pair_step integer,                -- step_index, or -1 when the run's steps were inferred (paired over the whole trace)
    category varchar,                 -- allreduce | all2all | comm_other
    ordinal bigint,                   -- k-th collective of this category in the step: the call site
    step_ordinal bigint,              -- k-th collective of any category in the step (on this rank)
    trace_id integer,
    rank integer,
    event_id bigint,                  -- -> gpu_events
    start_ns bigint, end_ns bigint, dur_ns bigint,
    offset_ns bigint,
    aligned_start_ns bigint,          -- on the reference rank's clock
    aligned_end_ns bigint,
    transfer_ns bigint,               -- shortest duration of this collective across ranks
    wait_ns bigint,                   -- dur_ns - transfer_ns: time spent waiting for the slowest rank
    is_late boolean,                  -- this rank started the collective last (the straggler)
    skew_ns bigint,                   -- latest minus earliest aligned start across ranks
    end_residual_ns bigint,           -- aligned end minus the mean aligned end: the quality of the clock alignment
    lateness_ns bigint,               -- aligned start minus the earliest rank's: how late this rank arrived
    caused_wait_ns bigint,            -- on the late rank: the other ranks' wait_ns summed (the wait it caused); else 0
    wait_kind varchar                 -- launch (the step's first collective) | gpu (a later one) | unknown (inferred steps)
);

-- The paired collectives of the steps of a phase filter (selected_steps: 'all' for any phase; a batch size and a
-- run, NULL for any; empty steps left out), one definition for the cross-rank report queries (report_comm,
-- report_comm_site), each with the batch size of its step (the run's ranks share step indexes; -1 for "no batch
-- size", inferred steps, so that joins on it match; the reports show it as NULL).
create or replace macro phase_collectives(of_phase, of_batch_size := null, of_run_id := null) as table
with steps_of_run as (
    select trace_runs.run_id, steps.step_index, any_value(steps.batch_size) as batch_size
    from selected_steps(of_phase, null, null, of_batch_size := of_batch_size, of_run_id := of_run_id) as steps
    join trace_runs using (trace_id)
    group by all
)

select collectives.*, coalesce(steps_of_run.batch_size, -1) as batch_size
from collectives
join steps_of_run using (run_id, step_index);

create table if not exists comm_alignment (
    run_id varchar,
    ranks bigint,
    collective_events bigint,         -- collective kernels eligible for pairing (in steps; all when steps are inferred)
    paired_events bigint,
    unpaired_events bigint,
    residual_p50_us double, residual_p90_us double, residual_max_us double,  -- |aligned end - mean aligned end|
    transfer_p50_us double,
    alignment varchar                 -- good | poor | unpaired: how much to trust this run's wait/straggler figures
);

-- Why each late rank was late (queries/comm_lateness.sql): one row per paired collective with a late rank, its
-- lateness split by what the late rank did since the previous paired collective, against the on-time rank.
create table if not exists collective_causes (
    run_id varchar,
    step_index integer,
    pair_step integer,
    category varchar,                 -- of the collective (allreduce | all2all | comm_other)
    ordinal bigint,                   -- its call site
    step_ordinal bigint,
    trace_id integer,                 -- the late rank's trace
    rank integer,                     -- the late rank
    early_trace_id integer,           -- the on-time rank (earliest aligned start) it is compared with
    early_rank integer,
    lateness_ns bigint,               -- = collectives.lateness_ns of the late rank = the sum of the six parts below
    host_ns bigint,                   -- more host-bound idle (the host issued the launches late)
    launch_ns bigint,                 -- more launch overhead (launch call -> GPU start, GPU idle)
    sync_ns bigint,                   -- more idle right after a host sync, up to its return
    device_ns bigint,                 -- more device-bound (and unknown) idle: waits on a stream, event, graph edge
    gpu_ns bigint,                    -- more GPU busy time: longer GPU work
    other_ns bigint,                  -- not explained by the interval (the previous collective ended apart, no
                                      -- earlier paired collective)
    cause varchar,                    -- the largest part: host | launch | sync | device | gpu | other | unknown
    longer_work varchar,              -- when gpu_ns > 0: the kernel categories that ran longer, longest first
    longer_kernel varchar,            -- when gpu_ns > 0: the kernel (short name) that ran longest beyond
    has_interval boolean,             -- every rank had the same previous paired collective
    late_from_ns bigint,              -- the interval's start (previous collective's end) on the late rank's clock
    early_from_ns bigint,             -- likewise on the on-time rank's
    late_span_ns bigint,              -- interval lengths
    early_span_ns bigint,
    host_diff_ns bigint,              -- late rank's minus on-time rank's time of each kind in the interval
    launch_diff_ns bigint,            -- (signed; with edge_ns they add up to lateness_ns exactly)
    sync_diff_ns bigint,
    device_diff_ns bigint,
    gpu_diff_ns bigint,
    edge_ns bigint                    -- the previous collective's aligned end, late minus on-time (clock alignment)
);

create table if not exists gpu_gaps (
    trace_id integer not null,
    rank integer,
    step_index integer,               -- the step holding the gap; for a between-step gap, the step that follows it
    between_steps boolean not null,   -- outside every step's GPU window (scheduler, sampling sync, Python, …)
    start_ns bigint not null,         -- the GPU went idle (end of the last activity before)
    end_ns bigint not null,           -- the next activity started
    dur_ns bigint not null,
    cause varchar not null,           -- host | sync | device | unknown (queries/gaps_build.sql says how)
    host_ns bigint not null,          -- GPU waiting for a late host to issue the next launch
    sync_ns bigint not null,          -- likewise, right after the host waited for the GPU (a blocking sync/copy)
    launch_ns bigint not null,        -- the launch path itself: launch call start -> GPU start, while idle
    device_ns bigint not null,        -- launched before the GPU went idle: a dependency (stream, event, graph edge)
    unknown_ns bigint not null,       -- no launch call found
    next_event_id bigint,             -- -> gpu_events: the activity that ended the gap
    launch_name varchar,              -- its launch call (cudaLaunchKernel, cudaGraphLaunch, …)
    launch_start_ns bigint,
    sync_end_ns bigint                -- the host sync that explains a 'sync' gap
);

-- Per step: its GPU idle gaps (gpu_gaps) added up by cause, in the step and before it (queries/step_idle_build.sql),
-- so the idle views do not add up every gap at each read. A step without gaps has no row.
create table if not exists step_idle (
    trace_id integer not null,
    step_index integer not null,      -- -> steps
    gaps bigint not null,             -- in-step gaps
    host_ns bigint not null,         -- Σ of the in-step gaps' columns of the same name
    sync_ns bigint not null,
    launch_ns bigint not null,
    device_ns bigint not null,
    unknown_ns bigint not null,
    longest_gap_ns bigint,            -- the longest in-step gap (NULL: none)
    launch_p50_ns double,             -- launch_ns of the in-step host and sync gaps: median (interpolated), max
    launch_max_ns bigint,
    between_gaps bigint not null,     -- the gaps between the previous step and this one
    between_idle_ns bigint not null, -- Σ of their dur_ns, host_ns, …
    between_host_ns bigint not null,
    between_sync_ns bigint not null,
    between_launch_ns bigint not null,
    between_device_ns bigint not null,
    between_unknown_ns bigint not null,
    primary key (trace_id, step_index)
);

-- `k25trace bench allreduce` results (k25trace/floor.py writes them; report --by floor / comm-bw / sol read them):
-- empty until a bench run is stored or imported.
create table if not exists allreduce_bench (
    bench_run varchar not null,       -- one invocation of `k25trace bench allreduce`
    measured_at timestamp not null,   -- when that run started (UTC)
    backend varchar not null,         -- nccl | gloo
    world_size integer not null,      -- processes (GPUs) in the all-reduce
    device_name varchar,              -- GPU name (rank 0), or 'cpu'
    torch_version varchar,
    dtype varchar not null,           -- element type of the message (bfloat16, ...)
    size_bytes bigint not null,       -- message size per rank
    batch_size integer,               -- the decode batch size this size was derived for (NULL: given by --sizes)
    size_source varchar,              -- 'trace' (collective args) | 'hidden' (hidden x batch x dtype) | 'given'
    mode varchar not null,            -- single | eager | graph
    count integer not null,           -- all-reduces per burst (1 for single)
    reps integer not null,            -- repetitions (single ops, or bursts) measured
    median_us double not null,        -- per all-reduce: single-op median, or median burst / count
    p90_us double not null,           -- likewise, 90th percentile
    burst_ms double,                  -- median burst time (NULL for single)
    algbw_gbps double,                -- size_bytes / median per-op time, GB/s (10^9)
    busbw_gbps double,                -- algbw x 2(n-1)/n
    kernel_median_us double,          -- NCCL kernel duration alone (profiled burst; NULL for single and gloo)
    kernel_p90_us double              -- likewise, 90th percentile
);

-- bench tables made before the kernel times existed
alter table allreduce_bench add column if not exists kernel_median_us double;
alter table allreduce_bench add column if not exists kernel_p90_us double;

-- Layer segments of every step (queries/layers_*.sql, k25trace/layers.py; README "Layers"): `pre`, layers
-- 0..L-1, `post`. Each GPU activity of a step is in one segment (the segments are runs of the step's activities
-- in the order start_ns, end_ns, event_id: positions first_pos .. first_pos + kernel_count - 1), and a step's
-- segment windows tile its wall (gpu_start_ns .. gpu_end_ns): the walls, busy, idle and overlap of its segments
-- add up to the step's exactly. An unsegmented step has one row (label 'step', kind 'unsegmented', a reason).
create table if not exists step_layers (
    trace_id integer not null,
    rank integer,
    step_index integer not null,
    segment_index integer not null,   -- 0 = pre, k + 1 = layer k, layers + 1 = post (0 alone: unsegmented)
    label varchar not null,           -- 'pre' | '0' … 'L-1' | 'post' | 'step' (unsegmented)
    layer integer,                    -- the layer index (NULL for pre, post, step)
    kind varchar not null,            -- 'dense' | 'moe' | 'other' for layers; 'pre' | 'post' | 'unsegmented'
    evidence varchar not null,        -- 'annotation' (…layers.N ranges around the launches) | 'sequence' (inferred
                                      -- from the repeating kernel sequence) | 'none' (unsegmented)
    layers integer not null,          -- the step's layer count L (0 when unsegmented)
    reason varchar,                   -- why the step is unsegmented; NULL when segmented
    start_ns bigint,                  -- the window: its first activity's start (pre: the step's GPU start)
    end_ns bigint,                    -- the next segment's start (the last segment: the step's GPU end)
    wall_ns bigint,                   -- end_ns - start_ns: the segment's share of the step's wall
    busy_ns bigint,                   -- GPU busy (union over streams) inside the window
    idle_ns bigint,                   -- wall_ns - busy_ns
    overlap_ns bigint,                -- time two or more categories ran at once inside the window
    kernel_count integer,             -- the segment's GPU activities
    kernel_ns bigint,                 -- their summed durations
    collectives integer,              -- of them collectives (allreduce, all2all, comm_other)
    first_pos integer,                -- position of its first activity in the step's order (0-based)
    first_event_id bigint,            -- that activity (-> gpu_events); NULL for an empty pre/post
    primary key (trace_id, step_index, segment_index)
);

create table if not exists step_layer_categories (
    trace_id integer not null,
    rank integer,
    step_index integer not null,
    segment_index integer not null,   -- -> step_layers
    category varchar not null,
    kernel_ns bigint not null,        -- summed durations of the segment's activities of the category
    busy_ns bigint not null,          -- exclusive: time in the window when this category alone was running
    kernel_count integer not null,
    primary key (trace_id, step_index, segment_index, category)
);

-- Per trace: the eager CPU-op calls of its non-empty steps, grouped by the step's phase and batch size, the op, its
-- input dims and the kernels it launched (queries/op_calls_build.sql; read by sol_op_calls.sql, which adds the
-- ranks of a run up). Built with the steps, so the speed-of-light views and the findings do not join every
-- kernel with its launch and CPU op at each read.
create table if not exists op_calls (
    trace_id integer not null,
    phase varchar not null,           -- the steps' phase
    batch_size integer,               -- the steps' batch size (NULL: inferred steps)
    op varchar,                       -- the CPU op (cpu_ops.name) that launched the kernels; NULL when not recorded
    input_dims varchar,               -- its Input Dims (record_shapes), as recorded
    kernel_set varchar,               -- the sorted signatures (name_id:GXxGYxGZ:BXxBYxBZ) of one call's kernels
                                      -- (NULL when none has its grid and block recorded)
    calls bigint not null,            -- op invocations (External id) with that kernel set
    kernels bigint not null,          -- their kernels
    kernel_ns bigint not null,        -- the kernels' summed durations
    categories varchar[],             -- the kernels' categories (distinct, sorted)
    name_ids integer[]                -- the kernels' names (distinct, sorted; -> kernel_names)
);

-- Per trace: the kernels of its steps that were replayed from a CUDA/HIP graph (their launch is a cudaGraphLaunch),
-- grouped per step and kernel configuration (queries/graph_kernels_build.sql; read by sol_graph_kernels.sql and
-- sol_graph_step_groups.sql). Built with the steps, so the speed-of-light views and the findings do not join every
-- kernel with its launch at each read.
create table if not exists graph_kernels (
    trace_id integer not null,
    step_index integer not null,      -- -> steps
    name_id integer not null,         -- -> kernel_names
    grid_x integer, grid_y integer, grid_z integer,     -- as gpu_events (NULL when the trace records none)
    block_x integer, block_y integer, block_z integer,
    kernels bigint not null,          -- the step's replayed kernels of that name, grid and block
    kernel_ns bigint not null,        -- their summed durations
    category varchar                  -- their category (gpu_events.category)
);
