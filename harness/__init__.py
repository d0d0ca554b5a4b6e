"""mps-compat's harness: eight packages on floors, lowest first: core < env < ops < parity < optim <
perf < report < plugin. A module imports only from its own floor and those below (docs/layout.md)."""
