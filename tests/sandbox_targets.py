"""Functions the sandbox self-tests run in the child process."""
import os
import time


def double(x):
    return 2 * x


def aborts():
    os.abort()


def segfaults():
    import ctypes
    ctypes.string_at(0)


def hangs():
    time.sleep(600)


def raises():
    raise ValueError("bad input\nsecond line")


def env(name):
    return os.environ.get(name)


def asks_torch_for_a_missing_name():
    import torch
    return torch.no_such_name
