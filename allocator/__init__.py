"""The LLAMA allocator (liblifetime_alloc.so, native: src/) and its launcher, `lifetime run`
(run.py: a command under one allocator, measured)."""
