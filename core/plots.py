"""PNG figures: matplotlib on its Agg backend (no display needed), set up in one place.

matplotlib is imported when the first figure is drawn (about half a second), so the
commands that draw nothing never pay for it."""

from __future__ import annotations


def pyplot():
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: str, dpi: int = 110) -> str:
    """Lays out, writes and closes `fig`; returns `path`."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path
