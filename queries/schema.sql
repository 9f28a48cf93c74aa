-- name: schema
-- The public schema of a k25trace database (see README "Schema"). Idempotent: creates what is missing.
-- creates: meta, traces, kernel_names, gpu_events, launches, annotations, cpu_ops, python_functions, captures, capture_levels, kernels (view)
-- reads: none
-- params: none
-- grain: traces = one row per loaded trace file; gpu_events = one row per GPU activity; launches = one row per CUDA runtime/driver call; annotations = one row per user annotation; cpu_ops = one row per CPU operator
create table if not exists meta (
    key varchar primary key,
    value varchar
);

create sequence if not exists trace_id_seq start 1;

create table if not exists traces (
    trace_id integer primary key,
    path varchar not null,            -- absolute path of the file as loaded
    file_name varchar not null,
    file_size bigint not null,        -- bytes on disk (compressed size for .gz)
    sha256 varchar not null unique,   -- content hash of the file on disk: loading it again is a no-op
    rank integer,                     -- distributedInfo.rank (NULL when the file has none)
    world_size integer,               -- distributedInfo.world_size
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
    loader_version varchar not null
);

create table if not exists kernel_names (
    name_id integer primary key,
    name varchar not null unique,     -- full demangled name as in the trace (can be several KB)
    short_name varchar not null       -- readable name: no return type, template args or argument list
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
