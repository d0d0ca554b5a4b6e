"""mps-compat's harness: seven packages on floors, lowest first: core < env < ops < parity < optim <
report < plugin. A module imports only from its own floor and those below (README, Layout)."""
