"""Our profiles as pprof `profile.proto` (`lifetime pprof PROFILE... -o OUT.pb.gz`).

    from interop import pprof
    summary = pprof.write(["a.ltprof", "b.ltprof"], "out.pb.gz",
                          view="lifetimes", group_by_class=True)
    builder, summary = pprof.build(paths)      # builder.profile: a pprof Profile message

The layout follows TCMalloc's lifetime and allocation profiles (convert.py says what
and where from); `profile.proto` is google/pprof's, vendored (Apache-2.0), and its
Python bindings (`profile_pb2`) are generated at build time like profile_format's.
"""

from interop.pprof.builder import ProfileBuilder, profile_pb2
from interop.pprof.convert import (
    ALLOCATIONS, CLASS_LABEL, DEFAULT_SAMPLE_TYPE, LIFETIMES, SAMPLE_TYPES, VIEWS, Summary,
    build, class_names, scaled, write)

__all__ = ["ALLOCATIONS", "CLASS_LABEL", "DEFAULT_SAMPLE_TYPE", "LIFETIMES", "ProfileBuilder",
           "SAMPLE_TYPES", "Summary", "VIEWS", "build", "class_names", "profile_pb2",
           "scaled", "write"]
