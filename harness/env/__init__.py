"""Floor 1, this machine: its facts, their fitness for each target, the environment suite's
checks, and the targets themselves (devices)."""
