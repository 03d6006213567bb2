"""The native allocation-lifetime sampler (liblifetime_sampler.so) and its launcher.

`launch.run_profiled(cmd, out_dir, ...)` runs a program with the sampler preloaded;
`launch.sampler_library_path()` finds the built library.
"""

from profiler.launch import SamplerNotBuiltError, run_profiled, sampler_library_path

__all__ = ["SamplerNotBuiltError", "run_profiled", "sampler_library_path"]
