"""`lifetime export MODEL_DIR --out DIR` (wired into lifetime/cli.py)."""

from __future__ import annotations

import argparse

from core.errors import printable
from core.files import writable_dir
from export.exporter import export_model


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export", help="XLA AOT-compile a trained model into a static C++ library",
        description="Compiles MODEL_DIR (model.keras, vocab.txt, config.json) into DIR: "
                    "include/, lib/liblifetime_model.a (model + XLA runtime + Abseil "
                    "subset), a CMake package (find_package(LifetimeModel)) and a "
                    "pkg-config file.  The XLA runtime is built once and cached under "
                    "$LIFETIME_CACHE_DIR (default ~/.cache/lifetime-models).")
    p.add_argument("model_dir", metavar="MODEL_DIR")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--graph", choices=("auto", "folded", "keras"), default="auto",
                   help="folded: the LSTM rewritten for one prediction, checked against the "
                        "model (fast); keras: the Keras model as is; auto: folded when it "
                        "applies (default)")
    p.add_argument("--target-cpu", default="host", metavar="CPU",
                   help="LLVM CPU for the compiled code: host (default: x86-64-v3 when "
                        "this CPU has AVX2 and FMA, else generic), '' for generic x86-64 "
                        "(runs anywhere, about 2x slower), or a name such as x86-64-v3")
    p.add_argument("--xla-flags", default=None, metavar="FLAGS",
                   help="XLA_FLAGS for the compilation (default: "
                        "%s, XLA's classic runtime: faster for small models; '' for "
                        "XLA's defaults)" % "--xla_cpu_use_thunk_runtime=false")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    flags = {} if args.xla_flags is None else {"xla_flags": args.xla_flags}
    writable_dir(args.out)
    m = export_model(args.model_dir, args.out, graph=args.graph,
                     target_cpu=args.target_cpu, **flags)
    print(f"exported {printable(args.model_dir)} -> {printable(args.out)}: "
          f"{printable(m['library'])} "
          f"({m['library_bytes'] / 1e6:.1f} MB, graph {m['graph']}, "
          f"{m['num_classes']} classes, vocabulary {m['vocab_size']}) in {m['seconds']} s")
    return 0
