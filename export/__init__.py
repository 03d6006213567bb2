"""XLA ahead-of-time export of a trained model into a C++ library with the prediction cache.

The export directory's format (manifest, layout) is core/export_dir.py's."""
