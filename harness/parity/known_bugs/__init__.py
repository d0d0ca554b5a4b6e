"""The wrong results users reported against accelerators, rebuilt at their edges as checks."""
