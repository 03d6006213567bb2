"""PNG figures for reports (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import numpy as np

from core.plots import pyplot, save_png as _save

plt = pyplot()


def confusion_png(matrix, class_names, title: str, path: str) -> str:
    m = np.asarray(matrix, float)
    rows = m.sum(axis=1, keepdims=True)
    share = np.divide(m, rows, out=np.zeros_like(m), where=rows > 0)
    fig, ax = plt.subplots(figsize=(5.5, 4.8))
    im = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(class_names)), class_names, rotation=45, ha="right")
    ax.set_yticks(range(len(class_names)), class_names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title, fontsize=10)
    for i in range(len(class_names)):
        for j in range(len(class_names)):
            if m[i, j]:
                ax.text(j, i, f"{share[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if share[i, j] > 0.5 else "black")
    fig.colorbar(im, ax=ax, fraction=0.046, label="share of the true class")
    return _save(fig, path)


def bars_png(groups: dict, title: str, path: str) -> str:
    """groups: predictor -> {metric label: value or None}."""
    names = list(groups)
    labels = list(next(iter(groups.values())))
    x = np.arange(len(labels))
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for i, name in enumerate(names):
        vals = [100 * (groups[name][k] or 0) for k in labels]
        ax.bar(x + i * width - 0.4 + width / 2, vals, width, label=name)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("%")
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return _save(fig, path)


def lines_png(x, series: dict, xlabel: str, title: str, path: str, logx: bool = False) -> str:
    """series: label -> list of values (None gaps allowed), in percent of 1."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for label, ys in series.items():
        ax.plot(x, [np.nan if y is None else 100 * y for y in ys], marker="o", label=label)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("%")
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(fig, path)
