"""What a benchmark may call its test versions (core/version_roles.py, issue 33 item 1):
the benchmarks that report figures on "test" or "unseen" versions ask here first.

`statuses(family, versions, model_dir, uses)` reads the model's config.json (its
recorded roles and the choices it depends on), refuses a reserved version, prints ONE
line naming every version that is not test data (seen in training or in selection),
and returns {label: role} for the results to carry.
"""

from __future__ import annotations

import json
import os

from core import version_roles


def model_config(model_dir: str | None) -> dict | None:
    path = os.path.join(model_dir, "config.json") if model_dir else None
    if not path or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def statuses(family: str, versions, model_dir: str | None, who: str,
             uses=(), train_versions=()) -> dict:
    """{label: {"role", "why"}} for FAMILY's VERSIONS (VERSION or VERSION/RUN) as WHO
    would report them; TRAIN_VERSIONS (the benchmark's own) count as training."""
    config = model_config(model_dir)
    roles = version_roles.roles_of(config)
    if config is not None and roles is None:
        print(f"{who}: model {model_dir} records no roles (trained before they were recorded): "
              "selection unknown", flush=True)
    roles = roles or {"train": [], "selection": []}
    roles = {**roles, "train": sorted(set(roles["train"]) | {
        version_roles.label(family, v) for v in train_versions})}
    found = version_roles.classify([version_roles.label(family, v) for v in versions], roles,
                                   config, source=f"model {model_dir}" if model_dir else who,
                                   uses=uses)
    line = version_roles.seen_line(found)
    if line:
        print(f"{who}: {line}", flush=True)
    return {s.label: {"role": s.role, "why": s.why} for s in found}


def refuse_reserved(family: str, versions, role: str, who: str) -> None:
    version_roles.refuse_reserved([version_roles.label(family, v) for v in versions], role, who)


def simulation_uses(policy: str) -> set[str]:
    """What a `lifetime simulate` run depends on besides the model: its policies
    (`--policy a,b:8` -> policy:a, policy:b) and the cost rule's context oracle row."""
    return {f"policy:{p.split(':')[0]}" for p in (policy or "paper").split(",")} | {"context_cost"}


def markdown_line(test_roles: dict | None) -> list[str]:
    """The results.md line for a benchmark's test versions that are not test data."""
    seen = {k: v for k, v in (test_roles or {}).items()
            if v["role"] != version_roles.TEST}
    if not seen:
        return []
    return ["**Not test data**: " + "; ".join(f"{k} is {v['role']} ({v['why']})"
                                             for k, v in seen.items())
            + " (core/version_roles.json).", ""]
