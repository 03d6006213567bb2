"""Coverage-guided fuzzing (atheris/libFuzzer) of everything that reads a profile or
another profiler's recording (the importers), and of the pprof converter."""
