-- name: report_kernels
-- The kernels that take the most time in the selected steps: per short name and category, calls and time per
-- step, mean/min/max µs per call, share of step wall time.
-- reads: gpu_events, kernel_names, selected_steps (macro)
-- params: $phase, $rank, $trace_id, $top, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per (category, short kernel name), the $top largest by time (ties by category, then name)
with selected_steps as (
    select trace_id, step_index, wall_ns
    from selected_steps($phase, $rank, $trace_id, of_batch_size := $batch_size, of_run_id := $run_id)
),

totals as (
    select count(*) as steps, sum(wall_ns) as wall_ns from selected_steps
),

per_kernel as (
    select
        gpu_events.category,
        kernel_names.short_name,
        count(*) as calls,
        sum(gpu_events.dur_ns) as kernel_ns,
        min(gpu_events.dur_ns) as min_ns,
        max(gpu_events.dur_ns) as max_ns
    from gpu_events
    join selected_steps using (trace_id, step_index)
    join kernel_names using (name_id)
    group by all
)

select
    per_kernel.category,
    per_kernel.short_name,
    round(per_kernel.calls / totals.steps, 2) as calls_per_step,
    round(per_kernel.kernel_ns / totals.steps / 1e6, 4) as ms_per_step,
    round(per_kernel.kernel_ns * 100.0 / nullif(totals.wall_ns, 0), 2) as pct_of_step,
    round(per_kernel.kernel_ns / per_kernel.calls / 1e3, 2) as mean_us,
    round(per_kernel.min_ns / 1e3, 2) as min_us,
    round(per_kernel.max_ns / 1e3, 2) as max_us
from per_kernel, totals
order by per_kernel.kernel_ns desc, per_kernel.category, per_kernel.short_name  -- ties in name order
limit $top
