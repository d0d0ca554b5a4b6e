"""Floor 6, the pytest side: hooks and fixtures, the record and conclude, options and targets."""
