"""Floor 3, numerical parity against float64 with the CPU as the yardstick: the numerics, op
parity, the property checks, whole models, the known accelerator bugs."""
