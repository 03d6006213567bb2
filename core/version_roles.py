"""The roles a family's versions play (issue 33 item 1), written down once:
`core/version_roles.json`.

  train      the model and the lookup tables are fit on them
  selection  every choice is made on them (hyperparameters, early stopping, wrappers,
             thresholds, policies, constants)
  test       touched only by the final report
  reserved   held out for an evaluation this project never sees: refused in every role

A version label is FAMILY-VERSION (`redis-6.2.14`, `postgres-16.2`, `clang-15`), as the
benchmarks write them; a label of no known family (the demo's `v2`) has no family role.

A dataset's manifest and a model's config.json carry `roles` ({"train": [...],
"selection": [...]}: the labels that played each role in making them; `record`).
`classify` says, for each version a tool is about to call "test" or "unseen", whether it
may: a version the model's roles or the family's table record as train or selection, or
one a recorded choice the model depends on was made on (`chosen_on`), is "seen
(training)" or "seen (selection)" instead, and `seen_line` says so in one line.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Iterable

from core.errors import UsageError

ROLES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "version_roles.json")
FORMAT = "lifetime-version-roles-v1"
TEST, SEEN_TRAINING, SEEN_SELECTION = "test", "seen (training)", "seen (selection)"


class ReservedVersionError(UsageError):
    """A reserved version given to a tool in any role (one line, status 1)."""


@functools.lru_cache(maxsize=1)
def table() -> dict:
    """core/version_roles.json, parsed once."""
    with open(ROLES_FILE, encoding="utf-8") as f:
        data = json.load(f)
    if data.get("format") != FORMAT:
        raise ValueError(f"{ROLES_FILE}: format {data.get('format')!r}, expected {FORMAT!r}")
    return data


def _version_tuple(version: str) -> tuple[int, ...] | None:
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def split_label(label: str) -> tuple[str | None, str]:
    """'redis-6.2.14' -> ('redis', '6.2.14'); a label of no known family -> (None, label)."""
    family, sep, version = str(label).partition("-")
    if sep and family in table()["families"]:
        return family, version.partition("/")[0]
    return None, str(label)


def label(family: str, version: str) -> str:
    return f"{family}-{version.partition('/')[0]}"


def reserved_reason(lbl: str) -> str | None:
    """Why LABEL is reserved, or None."""
    family, version = split_label(lbl)
    if family:
        bound = table()["families"][family].get("reserved_from")
        v, b = _version_tuple(version), _version_tuple(bound) if bound else None
        if v and b and v[:len(b)] >= b:
            name = table()["families"][family]["name"]
            return f"{name} {version} is reserved ({name} {bound} and newer)"
        return None
    for other in table().get("reserved_other", []):
        for prefix in other["labels"]:
            if lbl == prefix or str(lbl).startswith(prefix + "-"):
                return f"{lbl} is reserved ({other['name']})"
    return None


def refuse_reserved(labels: Iterable[str], role: str, where: str = "") -> None:
    """ReservedVersionError (one line) if any label is reserved."""
    for lbl in labels:
        why = reserved_reason(lbl)
        if why:
            raise ReservedVersionError(
                f"{where + ': ' if where else ''}{why}: held out for an evaluation this "
                f"project never sees, refused as a {role} version (core/version_roles.json)")


def family_role(lbl: str) -> str | None:
    """'train', 'selection', 'test' or 'reserved' from the family's table; None when the
    label is of no known family or the table gives its version no role."""
    if reserved_reason(lbl):
        return "reserved"
    family, version = split_label(lbl)
    if not family:
        return None
    fam = table()["families"][family]
    for role in ("train", "selection", "test"):
        if version in fam[role]:
            return role
    return None


def record(train: Iterable[str], selection: Iterable[str] = ()) -> dict:
    """The `roles` object a manifest carries: sorted, a train label not repeated as selection."""
    tr = sorted({str(x) for x in train if x})
    return {"train": tr, "selection": sorted({str(x) for x in selection if x} - set(tr))}


def roles_of(doc: dict | None) -> dict | None:
    """The `roles` a manifest or model config records; None for one made before roles
    were recorded (or a malformed one)."""
    roles = (doc or {}).get("roles")
    if not isinstance(roles, dict):
        return None
    out = {}
    for key in ("train", "selection"):
        v = roles.get(key, [])
        if not isinstance(v, list):
            return None
        out[key] = [str(x) for x in v]
    return out


def _applies(choice: dict, config: dict | None, uses: Iterable[str] = ()) -> bool:
    """Whether a recorded choice is one a model with this config.json, or a tool using
    USES (`policy:segregated`, `context_cost`: what a benchmark runs), depends on."""
    applies = choice.get("applies_to") or {}
    if "uses" in applies:
        return bool(set(applies["uses"]) & set(uses))
    if config is None:
        return False
    if "hyperparameters" in applies:
        hp = config.get("hyperparameters") or {}
        return all(hp.get(k) == v for k, v in applies["hyperparameters"].items())
    if "wrappers" in applies:
        ctx = config.get("context") or {}
        return bool(set(ctx.get("configured_wrappers") or ()) & set(applies["wrappers"]))
    return False  # thresholds made on training versions: not a test version's concern


def choices_on(lbl: str, config: dict | None, uses: Iterable[str] = ()) -> list[str]:
    """Recorded choices made on LABEL that a model with this config (or USES) depends on."""
    return [c["choice"] for c in table().get("chosen_on", [])
            if lbl in c.get("on", []) and _applies(c, config, uses)]


@dataclasses.dataclass(frozen=True)
class Status:
    label: str
    role: str          # TEST, SEEN_TRAINING or SEEN_SELECTION
    why: str = ""      # for a seen version: what records it


def classify(labels: Iterable[str], model_roles: dict | None, config: dict | None = None,
             source: str = "the model", uses: Iterable[str] = ()) -> list[Status]:
    """What each version a tool would call test/unseen may be called.  Refuses a
    reserved one (ReservedVersionError).  MODEL_ROLES: the model's recorded `roles`
    (None: unknown); CONFIG: its config.json (for the recorded choices it depends on);
    USES: what else the tool depends on (`policy:NAME`, `context_cost`)."""
    labels = sorted(set(labels))
    refuse_reserved(labels, "test")
    out = []
    for lbl in labels:
        if model_roles and lbl in model_roles["train"]:
            out.append(Status(lbl, SEEN_TRAINING, f"{source} records it as training"))
        elif model_roles and lbl in model_roles["selection"]:
            out.append(Status(lbl, SEEN_SELECTION, f"{source} records it as selection"))
        elif family_role(lbl) == "train":
            out.append(Status(lbl, SEEN_TRAINING, "core/version_roles.json: a training version"))
        elif family_role(lbl) == "selection":
            out.append(Status(lbl, SEEN_SELECTION, "core/version_roles.json: a selection version"))
        elif choices := choices_on(lbl, config, uses):
            out.append(Status(lbl, SEEN_SELECTION, f"{', '.join(choices)} chosen on it "
                              "(core/version_roles.json chosen_on)"))
        else:
            out.append(Status(lbl, TEST))
    return out


def seen_line(statuses: list[Status]) -> str | None:
    """ONE line naming every version that may not be called test, or None."""
    seen = [s for s in statuses if s.role != TEST]
    if not seen:
        return None
    return ("not test data: " + "; ".join(f"{s.label} is {s.role} ({s.why})" for s in seen)
            + "; shown, labelled so, never called test or unseen")


def roles_table() -> str:
    """The Markdown table of the roles per family (the README's)."""
    lines = ["| family | training | selection | test | reserved |", "|---|---|---|---|---|"]
    for fam in table()["families"].values():
        cells = [", ".join(fam[r]) or "eval split of training" for r in ("train", "selection", "test")]
        bound = fam.get("reserved_from")
        lines.append(f"| {fam['name']} | " + " | ".join(cells)
                     + f" | {bound + '+' if bound else '—'} |")
    for other in table().get("reserved_other", []):
        lines.append(f"| {other['name']} | — | — | — | all |")
    return "\n".join(lines)
