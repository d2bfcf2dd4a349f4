"""The in-flight decoding engine: admission, cache pools, decode loops (``batcher.py``).

A layer of its own, below ``server`` (the Triton models that adapt it) and ``export`` (the
quality gate and ``gpu-check`` decode with it too), above ``decoding`` (the beam search) and
``runtime`` (what runs the graphs). Torch-free and Triton-free.
"""

from .batcher import (
    EngineBusy,
    EnginePool,
    EngineStopped,
    InflightBatcher,
    QueueLimits,
    RequestCancelled,
    StepRuntime,
    check_request,
)

__all__ = ["EngineBusy", "EnginePool", "EngineStopped", "InflightBatcher", "QueueLimits", "RequestCancelled",
           "StepRuntime", "check_request"]
