"""Evidence about a candidate that its own Python cannot switch off.

- :mod:`.scan`: a static scan of the candidate's own modules for known ways out (runs in the parent).
- :mod:`.kernels`: which launched Triton kernels only move data (no arithmetic on loaded values).
- :mod:`.cuda_trace`: judging the CUDA kernels and copies a call really ran (the trace is taken in the
  child by ``jobs.trace``, started before user code is imported).
"""
