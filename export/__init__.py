"""XLA ahead-of-time export of a trained model into a C++ library with the prediction cache."""

#: What `lifetime export` writes beside the library: the model id, its context definition
#: and the files (read by the sampler launcher, evaluate-online and the simulator).
EXPORT_MANIFEST = "export_manifest.json"
