"""C++ names: demangling symbols (`demangle`, with cxxfilt) and reading the qualified
function name out of a demangled one (`qualified_name`), for rules that match
functions by name whatever their signature."""

from __future__ import annotations

import re

import cxxfilt


def demangle(name: str) -> str:
    """Demangled C++ name; C names and anything cxxfilt rejects come back unchanged."""
    if not name.startswith("_Z"):
        return name
    try:
        return cxxfilt.demangle(name)
    except cxxfilt.InvalidName:
        return name


_CLONE_SUFFIX = re.compile(r"( \[clone [^\]]*\])+$")
_OPEN = {"<": ">", "(": ")", "[": "]", "{": "}"}
_OPERATOR_PUNCT = set("<>=!+-*/%^&|~,")


def qualified_name(demangled: str) -> str:
    """The qualified function name of a demangled symbol: no return type, no
    parameter list, no qualifiers or clone suffix.

    ``void std::vector<int>::_M_realloc_insert<>(...) [clone .cold]`` ->
    ``std::vector<int>::_M_realloc_insert<>``;  ``(anonymous namespace)::f(int)`` ->
    ``(anonymous namespace)::f``;  ``X::operator()(int) const`` -> ``X::operator()``.
    Plain C names come back unchanged.
    """
    s = _CLONE_SUFFIX.sub("", demangled)
    depth = 0
    start = 0
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if depth == 0 and s.startswith("operator", i) and (i == 0 or s[i - 1] in ": ") \
                and not (i + 8 < n and (s[i + 8].isalnum() or s[i + 8] == "_")):
            i = _skip_operator(s, i + 8)
            continue
        if c in _OPEN:
            if depth == 0 and c == "(":
                close = _match(s, i)
                if s.startswith("::", close + 1):  # "(anonymous namespace)::", "f(int)::"
                    i = close + 1
                    continue
                return s[start:i]
            depth += 1
        elif c in ">)]}":
            depth = max(depth - 1, 0)
        elif c == " " and depth == 0:
            start = i + 1
        i += 1
    return s[start:]


def _match(s: str, i: int) -> int:
    depth = 0
    for j in range(i, len(s)):
        if s[j] in "([{<":
            depth += 1
        elif s[j] in ")]}>":
            depth -= 1
            if depth == 0:
                return j
    return len(s) - 1


def _skip_operator(s: str, i: int) -> int:
    """Index just past the operator's symbol (s[i:] follows the word 'operator')."""
    n = len(s)
    if s.startswith("()", i) or s.startswith("[]", i):
        return i + 2
    if s.startswith('""', i):  # user-defined literal: operator"" _x
        j = i + 2
        while j < n and (s[j] == " " or s[j].isalnum() or s[j] == "_"):
            j += 1
        return j
    if i < n and s[i] == " ":  # new, delete, new[], conversion operators: up to "("
        j, depth = i, 0
        while j < n and not (depth == 0 and s[j] == "("):
            if s[j] in "<[":
                depth += 1
            elif s[j] in ">]":
                depth -= 1
            j += 1
        return j
    j = i
    while j < n and s[j] in _OPERATOR_PUNCT:
        j += 1
    if s.startswith(" <", j):  # template arguments of an operator: "operator< <char>"
        j += 1
    return j
