#!/usr/bin/env python3
"""Latency and accuracy of an exported model (issue: ≤ 20 µs p50 uncached, ≤ 10 ns per
cache hit, ≤ 1 point accuracy loss against the unoptimized model).

    .venv/bin/python benchmarks/export_latency.py --model out/demo/model \
        --dataset out/demo/datasets/v2 [--rounds 20] [--runs 3] [--out out/bench/export_latency]

It exports MODEL_DIR several ways (VARIANTS: the default folded graph on XLA's classic
CPU runtime, for this CPU's x86-64 level and for generic x86-64; the plain Keras graph
through keras.export.ExportArchive on the same runtime; and that Keras graph on XLA's
default thunk runtime, the unoptimized baseline), builds
the C++ harness
(tests/native/export_consumer) against each with CMake find_package, and measures on
the dataset's stacks:
  - compiled latency per uncached prediction, from frame strings (tokenizer included)
    and from token ids: p50, p99 (one core, after a warm-up round), and from frame
    strings in the warm-up round itself (a fresh predictor, its frame memo cold);
    --runs fresh harness processes, median and range;
  - the prediction cache's hit cost (C++ and C API);
  - TensorFlow's own latency for one prediction in Python (eager Keras call and a
    tf.function), for scale;
  - accuracy (weighted by samples, and by context) of the Keras model and of each
    compiled library against the dataset's labels, and their argmax agreement.
Results go to OUT/export_latency.json and are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.export_harness_files import read_results, write_stacks  # noqa: E402


# name -> (export graph, XLA_FLAGS or None for the exporter's default, target CPU,
#          description)
VARIANTS = {
    "folded": ("folded", None, "host", "the default export (x86-64-v3 where the CPU has it)"),
    "folded-generic": ("folded", None, "", "the same graph for generic x86-64 (SSE2)"),
    "keras": ("keras", None, "host", "the Keras graph as is, classic XLA runtime"),
    "keras-thunk": ("keras", "", "host",
                    "the Keras graph, XLA's default thunk runtime: unoptimized"),
}
# Latency fields of the harness's `bench` that are summarized over --runs.
LATENCY_FIELDS = ("frames_p50_us", "frames_p99_us", "ids_p50_us", "ids_p99_us",
                  "frames_first_sight_p50_us", "frames_first_sight_p99_us", "cache_hit_ns",
                  "cache_hit_with_key_ns", "cache_hit_c_api_ns",
                  "cache_c_api_revalidate_1000_ns")


def log(msg: str) -> None:
    print(f"[export_latency] {msg}", flush=True)


def build_harness(export_dir: pathlib.Path, build: pathlib.Path) -> pathlib.Path:
    subprocess.run(["cmake", "-S", str(ROOT / "tests/native/export_consumer"), "-B",
                    str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    f"-DCMAKE_PREFIX_PATH={export_dir}"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    return build / "export_harness"


def accuracy(pred, label, weight) -> dict:
    hit = np.asarray(pred) == label
    return {"weighted_exact": round(float(np.sum(hit * weight) / np.sum(weight)), 4),
            "unweighted_exact": round(float(np.mean(hit)), 4)}


def python_latency(model, x: np.ndarray, calls: int) -> dict:
    import tensorflow as tf

    one = tf.constant(x[:1])
    fn = tf.function(lambda t: model(t, training=False))
    out = {}
    for name, call in (("keras_eager_us", lambda: model(one, training=False)),
                       ("tf_function_us", lambda: fn(one))):
        call()
        times = []
        for i in range(calls):
            t = tf.constant(x[i % len(x)][None])
            t0 = time.perf_counter()
            (model(t, training=False) if name == "keras_eager_us" else fn(t)).numpy()
            times.append((time.perf_counter() - t0) * 1e6)
        out[name] = round(float(np.median(times)), 1)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="model directory from `lifetime train`")
    ap.add_argument("--dataset", required=True, help="dataset whose stacks are predicted")
    ap.add_argument("--rounds", type=int, default=20, help="timed rounds over the stacks")
    ap.add_argument("--runs", type=int, default=3,
                    help="harness runs per variant (fresh processes); each latency is "
                         "reported as the median over runs with the min and max")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma-separated subset of: " + ", ".join(
                        f"{k} ({v[3]})" for k, v in VARIANTS.items()))
    ap.add_argument("--out", default="out/bench/export_latency")
    args = ap.parse_args(argv)
    unknown = [v for v in args.variants.split(",") if v and v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {', '.join(unknown)} (known: {', '.join(VARIANTS)})")

    from export.exporter import export_model
    from model.data import load_dataset
    from model.features import encode_frames
    from model.io import hparams_of, load_model_dir

    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    model, config, vocab = load_model_dir(args.model)
    hp = hparams_of(config)
    ex = load_dataset(args.dataset).all()
    if not len(ex):
        sys.exit(f"{args.dataset}: no examples")
    frames = [list(f) for f in ex.frames]
    x = np.stack([encode_frames(f, vocab, hp) for f in frames]).astype(np.int32)
    keras_pred = np.argmax(model.predict(x, batch_size=512, verbose=0), -1)
    stacks = write_stacks(out / "stacks.bin", frames)
    result = {
        "model": str(args.model), "dataset": str(args.dataset), "contexts": len(frames),
        "hyperparameters": {k: config["hyperparameters"][k] for k in
                            ("architecture", "max_frames", "tokens_per_frame", "embedding_dim",
                             "lstm_units", "vocab_size")},
        "cpu": next((line.split(":", 1)[1].strip() for line in
                     open("/proc/cpuinfo") if line.startswith("model name")), "?"),
        "keras_accuracy": accuracy(keras_pred, ex.label, ex.weight),
        "python": python_latency(model, x, 300),
        "compiled": {},
    }
    log(f"{len(frames)} stacks; Keras accuracy {result['keras_accuracy']}; "
        f"TF in Python {result['python']}")
    for route in [r for r in args.variants.split(",") if r]:
        graph, flags, cpu, _ = VARIANTS[route]
        export_dir = out / f"export-{route}"
        log(f"exporting {route} -> {export_dir}")
        manifest = export_model(args.model, export_dir, graph=graph, target_cpu=cpu,
                                **({} if flags is None else {"xla_flags": flags}))
        harness = build_harness(export_dir, out / f"harness-{route}")
        subprocess.run([str(harness), "predict-frames", str(stacks), str(out / "pred.bin")],
                       check=True)
        compiled, _ = read_results(out / "pred.bin", len(config["class_names"]))
        log(f"timing {route}: {args.runs} runs of {args.rounds} rounds over {len(frames)} "
            "stacks")
        runs = [json.loads(subprocess.run(
            ["taskset", "-c", "0", str(harness), "bench", str(stacks), str(args.rounds)],
            check=True, capture_output=True, text=True).stdout) for _ in range(args.runs)]
        bench = {"examples": runs[0]["examples"], "rounds": args.rounds, "runs": args.runs,
                 "misses_in_hit_loops": max(r["misses_in_hit_loops"] for r in runs)}
        for k in LATENCY_FIELDS:
            vals = sorted(r[k] for r in runs)
            bench[k] = round(float(np.median(vals)), 2)
            bench[k + "_range"] = [vals[0], vals[-1]]
        acc = accuracy(compiled, ex.label, ex.weight)
        result["compiled"][route] = {
            **bench, "accuracy": acc,
            "accuracy_loss_points": round(100 * (result["keras_accuracy"]["weighted_exact"]
                                                 - acc["weighted_exact"]), 2),
            "argmax_agreement": round(float(np.mean(compiled == keras_pred)), 4),
            "graph": manifest["graph"], "xla_flags": manifest["xla_flags"],
            "target_cpu": manifest["target_cpu"],
            "library_mb": round(manifest["library_bytes"] / 1e6, 1),
            "export_seconds": manifest["seconds"],
        }
        log(f"{route}: {json.dumps(result['compiled'][route])}")
    (out / "export_latency.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
