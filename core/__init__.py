"""The base layer: what every other package may import, importing nothing of the project.

errors (the one user-facing error base), files (input and output file checks), context
(the allocation context's definition), lifetimes (T95, the label scheme, the cost rule),
tokenizer (frame strings to tokens), symbolize (addresses to frames).  tests/test_layering.py
keeps it so: a module here that imports another project package fails the suite.
"""
