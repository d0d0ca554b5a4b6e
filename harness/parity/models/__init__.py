"""Whole-model parity: forward and backward, a few training steps, greedy generation.

runs.py      the sides' runs on the dataset's rows in float32, and the machinery every run
             shares (sides, autocast, a step, greedy generation, the comparison of a target
             with float64) -> StepRun, TrainRun, GenerationRun
judge.py     measured, then judged: the verdicts
inputs.py    the inputs users get burned by (padded batches, prompts of different lengths,
             a long KV cache) and the float32 runs on them
precision.py the runs under torch.autocast in float16 and bfloat16, on those inputs
references.py references that cannot share a bug: sdpa against eager attention, the KV
             cache against recomputation
"""
