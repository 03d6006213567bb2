"""XLA ahead-of-time export of a trained model into a C++ library with the prediction cache."""
