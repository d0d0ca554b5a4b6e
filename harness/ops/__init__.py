"""Floor 2, op coverage: every OpInfo op run and classified on a target, PyTorch's own
declarations about its ops, MPS fallbacks, the static MPS kernel table, a model's audited step."""
