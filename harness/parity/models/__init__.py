"""Whole-model parity: forward and backward, a few training steps, greedy generation."""
