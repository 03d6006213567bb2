"""`lifetime export MODEL_DIR --out DIR`: XLA AOT-compile a trained model into a
standalone static C++ library (llama-paper §2.2) with the prediction cache (§2.3).

Steps: read and check MODEL_DIR (model/io.py) -> write a fixed-shape SavedModel (feed `token_ids`
int32 [1, max_tokens], fetch `probabilities`) -> `saved_model_cli aot_compile_cpu
--multithreading false` -> compile our C++ API with the generated header, vocabulary
and class table -> merge API, model objects, XLA runtime and Abseil subset into
DIR/lib/liblifetime_model.a -> headers, CMake package config, pkg-config file, model
card.  The runtime is built once and cached (export/runtime_build.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from core import export_dir
from export import codegen, graph as graphs, runtime_build
from core.errors import LifetimeError
from core.lifetimes import LabelScheme
from model import io
from model.io import ModelDir

# TensorFlow and Keras are imported inside functions: `lifetime --help` must not pay for them.

log = logging.getLogger("export")

HERE = pathlib.Path(__file__).resolve().parent
CPP_CLASS = "lifetime_model_aot::LifetimeModelXla"
AOT_PREFIX = "aot/lifetime_model_xla"
AOT_OBJECTS = ("lifetime_model_xla.o", "lifetime_model_xla_constants.o",
               "lifetime_model_xla_metadata.o")
LIBRARY = os.path.basename(export_dir.LIBRARY)
# XLA's classic CPU runtime compiles the graph into one function; the default thunk
# runtime dispatches each fused op separately, which dominates a model this small
# (folded default model: about 12 us against 21 us per prediction, measured by
# benchmarks/export_latency.py).
DEFAULT_XLA_FLAGS = "--xla_cpu_use_thunk_runtime=false"
# `--target-cpu host` (the default): the x86-64 level of the machine that exports, which
# is the machine that runs the allocator in this project's flow.  x86-64-v3 (AVX2, FMA)
# halves a prediction against generic x86-64 (SSE2); v4 (AVX-512) measured no faster.
# The library refuses to create a predictor on a CPU without the level's features.
HOST = "host"
X86_64_V3_FLAGS = frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe",
                             "xsave"})
VERSION = "1.0.0"


class ExportError(LifetimeError):
    """A clear, user-facing reason why the export failed (a bad model directory is a
    model.io.ModelDirError, as everywhere else)."""


def label_scheme_of(md: ModelDir) -> LabelScheme:
    """The label scheme the model was trained with (config.json's, its dataset's), with
    one class per class name."""
    where = os.path.join(md.path, io.CONFIG_FILE)
    try:
        scheme = LabelScheme.from_json(md.config["label_scheme"])
    except (KeyError, TypeError, LifetimeError) as e:
        raise ExportError(f"{where}: no usable label_scheme ({e})") from e
    if scheme.num_classes != len(md.class_names):
        raise ExportError(f"{where}: {len(md.class_names)} class names but "
                          f"{len(scheme.boundaries)} class boundaries (classes = boundaries + 2)")
    return scheme


def model_id_of(md: ModelDir) -> str:
    """sha256 over the files that make the model: config.json, vocab.txt, model.keras."""
    h = hashlib.sha256()
    for name in (io.CONFIG_FILE, io.VOCAB_FILE, io.MODEL_FILE):
        p = pathlib.Path(md.path, name)
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.is_file() else b""))
    return h.hexdigest()


# ------------------------------------------------------------------------------------
# Serving SavedModel and XLA AOT compilation.

def write_saved_model(md: ModelDir, out: pathlib.Path, route: str = "auto") -> dict:
    """Writes the fixed-shape SavedModel; returns {"graph": route used, ...}."""
    import tensorflow as tf

    model, hp = md.load_keras(), md.hparams
    shape = tuple(model.inputs[0].shape) if getattr(model, "inputs", None) else None
    if shape is not None and shape[-1] not in (None, hp.max_tokens):
        raise ExportError(f"{md.path}/model.keras: input length {shape[-1]} != max_tokens "
                          f"{hp.max_tokens} of config.json")
    info: dict = {}
    if route in ("auto", "folded"):
        try:
            w = graphs.extract_weights(model)
            fn = graphs.folded_function(w, hp.architecture, hp.max_frames, hp.tokens_per_frame)
            probe = graphs.probe_inputs(len(md.vocab), hp.max_frames, hp.tokens_per_frame)
            info["folded_max_abs_dp"] = graphs.verify(model, fn, probe)
            module = tf.Module()
            module.serve = fn
            tf.saved_model.save(module, str(out), signatures={"serving_default": fn})
            info["graph"] = "folded"
            return info
        except graphs.UnsupportedModel as e:
            if route == "folded":
                raise ExportError(f"--graph folded: {e}") from e
            log.warning("folded graph not applicable (%s); compiling the Keras model as is", e)
    import keras

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda token_ids: {graphs.FETCH: model(token_ids, training=False)},
        input_signature=[tf.TensorSpec([1, hp.max_tokens], tf.int32, name=graphs.FEED)])
    archive.write_out(str(out), verbose=False)
    info["graph"] = "keras"
    return info


def check_saved_model(path: pathlib.Path) -> None:
    """Clear errors for a missing or corrupt SavedModel before tfcompile sees it."""
    from tensorflow.core.protobuf import saved_model_pb2

    pb = path / "saved_model.pb"
    if not pb.is_file():
        raise ExportError(f"{path}: not a SavedModel (no saved_model.pb)")
    sm = saved_model_pb2.SavedModel()
    try:
        sm.ParseFromString(pb.read_bytes())
    except Exception as e:  # noqa: BLE001 - protobuf raises DecodeError and friends
        raise ExportError(f"{pb}: corrupt SavedModel ({type(e).__name__}: {e})") from e
    graphs_ok = [mg for mg in sm.meta_graphs if "serve" in mg.meta_info_def.tags]
    if not graphs_ok or "serving_default" not in graphs_ok[0].signature_def:
        raise ExportError(f"{pb}: corrupt SavedModel (no 'serve' graph with a "
                          "'serving_default' signature)")
    sig = graphs_ok[0].signature_def["serving_default"]
    if graphs.FEED not in sig.inputs or graphs.FETCH not in sig.outputs:
        raise ExportError(f"{pb}: signature needs input {graphs.FEED!r} and output "
                          f"{graphs.FETCH!r}, has {list(sig.inputs)} -> {list(sig.outputs)}")


def resolve_target_cpu(target_cpu: str, cpuinfo: str = "/proc/cpuinfo") -> str:
    """`host` -> x86-64-v3 when this CPU has its features, else "" (generic x86-64)."""
    if target_cpu != HOST:
        return target_cpu
    try:
        with open(cpuinfo) as f:
            flags = next((set(line.split(":", 1)[1].split()) for line in f
                          if line.startswith("flags")), set())
    except OSError:
        flags = set()
    return "x86-64-v3" if X86_64_V3_FLAGS <= flags else ""


def aot_compile(saved_model: pathlib.Path, work: pathlib.Path, target_cpu: str = "",
                xla_flags: str | None = None) -> pathlib.Path:
    """Runs `saved_model_cli aot_compile_cpu`; returns the directory of .h and .o files.

    The output prefix is relative to `work` and fixed, because tfcompile names the entry
    point after it: the same model then gives the same header and objects."""
    check_saved_model(saved_model)
    (work / "aot").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("XLA_FLAGS", None)
    if xla_flags:
        env["XLA_FLAGS"] = xla_flags
    cmd = [sys.executable, "-m", "tensorflow.python.tools.saved_model_cli", "aot_compile_cpu",
           "--dir", str(saved_model.resolve()), "--tag_set", "serve",
           "--signature_def_key", "serving_default", "--output_prefix", AOT_PREFIX,
           "--cpp_class", CPP_CLASS, "--multithreading", "false",
           "--target_cpu", target_cpu]
    log.info("XLA AOT compile: saved_model_cli aot_compile_cpu (target cpu %r)",
             target_cpu or "generic")
    res = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        tail = "\n".join(res.stderr.strip().splitlines()[-8:])
        raise ExportError(f"saved_model_cli aot_compile_cpu failed ({res.returncode}) on "
                          f"{saved_model}:\n{tail}")
    out = work / "aot"
    # The constants object is absent when XLA embeds the constants in the code object
    # (e.g. --xla_cpu_use_thunk_runtime=false).
    missing = [n for n in ("lifetime_model_xla.h", *AOT_OBJECTS)
               if not (out / n).is_file() and "constants" not in n]
    if missing:
        raise ExportError(f"saved_model_cli aot_compile_cpu did not write {missing}")
    return out


# ------------------------------------------------------------------------------------
# The C++ library.

def _run(cmd: list[str], **kw) -> None:
    runtime_build.run_command(cmd, ExportError, capture=True, **kw)


def build_library(md: ModelDir, aot: pathlib.Path, work: pathlib.Path, out: pathlib.Path,
                  runtime: pathlib.Path, model_id: str, route: str,
                  digests: dict[str, str], target_cpu: str = "") -> pathlib.Path:
    """Builds lib/liblifetime_model.a; records each part's sha256 in `digests`."""
    gen = work / "gen"
    gen.mkdir(parents=True, exist_ok=True)
    shutil.copy2(aot / "lifetime_model_xla.h", gen / "lifetime_model_xla.h")
    hp = md.hparams
    (gen / "lifetime_model_data.h").write_text(codegen.data_header(
        hp.max_frames, hp.tokens_per_frame, len(md.class_names), len(md.vocab),
        target_cpu == "x86-64-v3", md.context.size_feature, md.backoff))
    (gen / "lifetime_model_data.cc").write_text(codegen.data_source(
        md.vocab.tokens, md.class_names, hp.max_frames, hp.tokens_per_frame, model_id, route,
        md.context.to_json()["version"], list(md.context.wrappers), target_cpu or "generic",
        labels=label_scheme_of(md), size_frame=md.context.size_feature, backoff=md.backoff))
    tf_include = runtime_build.tensorflow_dir() / "include"
    build = work / "build"
    gen_args = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run(["cmake", "-S", str(HERE / "cc"), "-B", str(build), *gen_args,
          "-DCMAKE_BUILD_TYPE=Release", f"-DGEN_DIR={gen}", f"-DTF_INCLUDE={tf_include}"])
    _run(["cmake", "--build", str(build)])
    # One archive: API + model objects + runtime + Abseil (GNU ar MRI script; inputs
    # copied to plain names because MRI cannot quote paths).
    parts = work / "parts"
    parts.mkdir(exist_ok=True)
    inputs = [("lib", build / "liblifetime_api.a")]
    inputs += [("mod", aot / n) for n in AOT_OBJECTS if (aot / n).is_file()]
    inputs += [("lib", runtime / "lib" / n) for n in runtime_build.LIBS]
    script = [f"CREATE {parts / LIBRARY}"]
    for kind, src in inputs:
        dst = parts / src.name
        shutil.copy2(src, dst)
        digests[src.name] = hashlib.sha256(dst.read_bytes()).hexdigest()
        script.append(f"{'ADDLIB' if kind == 'lib' else 'ADDMOD'} {dst}")
    script += ["SAVE", "END"]
    _run(["ar", "-M"], input="\n".join(script) + "\n")
    _run(["ranlib", "-D", str(parts / LIBRARY)])
    lib_dir = out / "lib"
    lib_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(parts / LIBRARY, lib_dir / LIBRARY)
    return lib_dir / LIBRARY


def _write_package(md: ModelDir, out: pathlib.Path, aot: pathlib.Path, model_id: str) -> None:
    inc = out / "include"
    (inc / "lifetime_model").mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "cc" / "lifetime_model.h", inc / "lifetime_model.h")
    shutil.copy2(aot / "lifetime_model_xla.h", inc / "lifetime_model" / "lifetime_model_xla.h")
    cm = out / "lib" / "cmake" / "LifetimeModel"
    cm.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "cmake" / "LifetimeModelConfig.cmake", cm / "LifetimeModelConfig.cmake")
    (cm / "LifetimeModelConfigVersion.cmake").write_text(
        (HERE / "cmake" / "LifetimeModelConfigVersion.cmake.in").read_text()
        .replace("@VERSION@", VERSION))
    pc = out / "lib" / "pkgconfig"
    pc.mkdir(parents=True, exist_ok=True)
    (pc / "lifetime_model.pc").write_text(
        (HERE / "cmake" / "lifetime_model.pc.in").read_text()
        .replace("@VERSION@", VERSION).replace("@MODEL_ID@", model_id[:12]))
    share = out / "share" / "lifetime_model"
    share.mkdir(parents=True, exist_ok=True)
    for name in (io.CARD_FILE, io.CONFIG_FILE, io.METRICS_FILE):
        src = pathlib.Path(md.path, name)
        if src.is_file():
            shutil.copy2(src, share / name)
    if not (share / "model_card.md").exists():
        (share / "model_card.md").write_text(f"# Lifetime model {model_id[:12]}\n\n"
                                             "(the model directory had no model card)\n")


def export_model(model_dir: str | os.PathLike, out_dir: str | os.PathLike, *,
                 graph: str = "auto", target_cpu: str = HOST,
                 xla_flags: str | None = DEFAULT_XLA_FLAGS,
                 keep_work: str | os.PathLike | None = None) -> dict:
    """Exports MODEL_DIR into out_dir; returns the export manifest (also written there)."""
    start = time.monotonic()
    md = io.read_model_dir(str(model_dir))
    hp = md.hparams
    labels = label_scheme_of(md)
    out = pathlib.Path(out_dir)
    if out.exists() and any(out.iterdir()) and not export_dir.is_export(str(out)):
        raise ExportError(f"{out}: exists and is not an earlier export; refusing to overwrite")
    runtime = runtime_build.ensure_runtime()
    model_id = model_id_of(md)
    target_cpu = resolve_target_cpu(target_cpu)
    with tempfile.TemporaryDirectory(prefix="lifetime-export-") as tmp:
        work = pathlib.Path(keep_work) if keep_work else pathlib.Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        saved = work / "saved_model"
        shutil.rmtree(saved, ignore_errors=True)
        log.info("writing the serving SavedModel (token_ids [1, %d])", hp.max_tokens)
        info = write_saved_model(md, saved, graph)
        aot = aot_compile(saved, work, target_cpu, xla_flags)
        for sub in ("include", "lib", "share"):
            shutil.rmtree(out / sub, ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        log.info("building %s", out / "lib" / LIBRARY)
        parts: dict[str, str] = {}
        lib = build_library(md, aot, work, out, runtime, model_id, info["graph"], parts,
                            target_cpu)
        _write_package(md, out, aot, model_id)
    manifest = {
        "model_dir": str(pathlib.Path(md.path).resolve()),
        "model_id": model_id,
        "graph": info["graph"],
        "folded_max_abs_dp": info.get("folded_max_abs_dp"),
        "architecture": hp.architecture,
        "max_frames": hp.max_frames, "tokens_per_frame": hp.tokens_per_frame,
        "max_tokens": hp.max_tokens, "num_classes": len(md.class_names),
        "class_names": md.class_names, "vocab_size": len(md.vocab),
        # The label scheme (the info struct's label_clock, boundaries, boundaries_ns):
        # boundaries in the clock's unit (ms or bytes), boundaries_ns on the wall clock.
        "label_scheme": export_dir.label_scheme_json(labels),
        "context": md.context.to_json(),
        "tensorflow": runtime_build.tensorflow_version(),
        "runtime": runtime.name, "target_cpu": target_cpu or "generic",
        "xla_flags": xla_flags or "",
        "library": str(lib.relative_to(out)), "library_bytes": lib.stat().st_size,
        # Every part is reproducible except tfcompile's metadata object: TF 2.20 writes its
        # CompilationResultProto (unused at run time; the header passes nullptr) with map
        # entries in varying order.
        "parts_sha256": parts,
        "seconds": round(time.monotonic() - start, 1),
    }
    export_dir.write_manifest(str(out), manifest)
    return {"format": export_dir.FORMAT, **manifest}
