-- name: apply_kernel_classes
-- Write each GPU activity's category from kernel_classes into gpu_events.category.
-- creates: gpu_events.category (updated in place)
-- reads: gpu_events, kernel_classes
-- params: none
-- grain: one row per GPU activity (update)
update gpu_events
set category = kernel_classes.category
from kernel_classes
where gpu_events.name_id = kernel_classes.name_id
    and gpu_events.kind = kernel_classes.kind
    and gpu_events.collective_name is not distinct from kernel_classes.collective_name
    and gpu_events.category is distinct from kernel_classes.category
