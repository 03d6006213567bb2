"""Coverage-guided fuzzing (atheris/libFuzzer) of everything that reads a profile."""
