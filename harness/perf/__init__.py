"""Speed and memory across upgrades: op and model times, cold starts, per-shape costs, memory
over a long run (the perf suite), and how a perf record compares with a baseline's."""
