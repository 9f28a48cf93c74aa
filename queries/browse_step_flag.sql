-- name: browse_step_flag
-- Why one step may be suspicious: when one GPU copy or one idle gap is more than half of its GPU wall (a real
-- SGLang decode step was 98 % one blocking copy), the reason in words; no row otherwise. Same rule as the flag
-- column of report_timeline.
-- reads: steps, gpu_events, gpu_gaps
-- params: $trace_id, $step_index
-- grain: at most one row
with step as (
    select wall_ns from steps where trace_id = $trace_id and step_index = $step_index and wall_ns > 0
),

longest_copy as (
    select max(dur_ns) as copy_ns
    from gpu_events
    where trace_id = $trace_id and step_index = $step_index and kind = 'memcpy'
),

longest_gap as (
    select max(dur_ns) as gap_ns, arg_max(cause, dur_ns) as cause
    from gpu_gaps
    where trace_id = $trace_id and step_index = $step_index and not between_steps
)

select
    case
        when longest_copy.copy_ns > 0.5 * step.wall_ns then 'one copy is '
            || round(longest_copy.copy_ns * 100.0 / step.wall_ns)::int || ' % of the step ('
            || round(longest_copy.copy_ns / 1e6, 3) || ' ms)'
        else 'one ' || longest_gap.cause || ' gap is ' || round(longest_gap.gap_ns * 100.0 / step.wall_ns)::int
            || ' % of the step (' || round(longest_gap.gap_ns / 1e6, 3) || ' ms)'
    end as flag
from step, longest_copy, longest_gap
where longest_copy.copy_ns > 0.5 * step.wall_ns or longest_gap.gap_ns > 0.5 * step.wall_ns
