"""One fuzz target under libFuzzer: `python -m fuzz.run TARGET CORPUS_DIR [libFuzzer flags]`.

Instruments the project's reader modules for coverage, then runs libFuzzer on the
target; an input that raises anything but the target's expected errors, hangs past
-timeout or grows past -rss_limit_mb is a crash, saved under -artifact_prefix."""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["core", "profile_format", "pipeline", "interop", "simulator",
                                         "lifetime", "model", "fuzz"]):
    from fuzz import targets

    targets.load()  # what the targets import lazily, imported here to be instrumented


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in targets.TARGETS:
        sys.exit(f"usage: python -m fuzz.run {{{','.join(targets.TARGETS)}}} CORPUS [flags]")
    target = targets.TARGETS[sys.argv[1]]
    expected = targets.expected(sys.argv[1])

    def one_input(data: bytes) -> None:
        try:
            target(data)
        except expected:
            pass

    atheris.Setup([sys.argv[0]] + sys.argv[2:], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
