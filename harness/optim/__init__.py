"""Floor 4, the documented training optimizations: the claims table, the workloads, the
measurements of memory and time, and the claims measured and judged."""
