"""Beam pipeline options for the `lifetime` jobs: checked, and local by default.

Every option a job does not know itself is a Beam pipeline option.  Beam's own
parsing discards what it does not recognise with a log line (so an unquoted
`--profiles P/*.ltprof` once built from the first file alone and exited 0); here
an argument no `PipelineOptions` class defines is an error instead.

With no `--runner`, or `--runner=DirectRunner`, the job runs on Beam's FnApiRunner,
the local runner DirectRunner itself ends up on for these batch jobs, without its
first attempt to download and start the Prism runner.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, _BeamArgumentParser
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from core.errors import UsageError

_LOCAL = (None, "DirectRunner", "SwitchingDirectRunner")


def pipeline_options(beam_args: list[str] | None) -> PipelineOptions:
    """PipelineOptions from command-line arguments; UsageError for unknown ones."""
    beam_args = list(beam_args or [])
    parser = _BeamArgumentParser(allow_abbrev=False)
    for cls in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        cls._add_argparse_args(parser)  # how PipelineOptions.get_all_options parses
    _, unknown = parser.parse_known_args(beam_args)
    if unknown:
        hint = ""
        if any(not a.startswith("-") for a in unknown):
            hint = " (quote a glob given to --profiles, or list the files after it)"
        raise UsageError(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return PipelineOptions(beam_args)


def make_pipeline(beam_args: list[str] | None) -> beam.Pipeline:
    """A Pipeline on the runner the options name, or locally on the FnApiRunner."""
    options = pipeline_options(beam_args)
    if options.view_as(StandardOptions).runner in _LOCAL:
        return beam.Pipeline(runner=FnApiRunner(), options=options)
    return beam.Pipeline(options=options)
