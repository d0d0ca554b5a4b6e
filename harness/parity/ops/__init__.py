"""Op parity: every OpInfo op x dtype x pass on a target against float64 and the CPU."""
