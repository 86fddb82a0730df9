"""The fragmentation study's report: a table per variant, JSON entries and one plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fleet.sim.fragmentation import StudyConfig, VariantResult
from propagation.views import FitMode

LABEL = {FitMode.NODE_AWARE: "node-aware", FitMode.SUMMED: "summed"}


def rules(config: StudyConfig) -> str:
    return (
        "Fragmentation study (the measure of the trace's paper, Weng et al. ATC'23): pods "
        f"sampled with replacement (seed {config.seed}, {config.repeats} sample(s) per "
        "variant, averaged; both modes see the same samples) and placed one at a time, no "
        f"departures, onto the whole node inventory dealt round-robin into {config.clusters} "
        "member clusters: the hub picks the cluster with gang division (node-aware or summed "
        "fit; a pod's gpu_spec as a required node label nvidia.com/gpu.product), the member "
        "places it on a node (best fit, GPU models honoured). A summed-mode pod whose cluster "
        "has no node for it is arrived but not allocated. Stop: every GPU allocated, "
        f"{config.give_up} arrivals in a row without a node (the fleet is full to that mode; "
        "'*' marks levels past a mode's stop, which repeat its final state), or arrived "
        f"demand at {config.max_fill:.0%} of the fleet's GPUs.\n"
        "fill = arrived GPU demand / fleet GPUs (a share of a GPU counts as its fraction). "
        "unallocated = wholly free GPUs / all GPUs: a GPU shared by pods with gpu_milli < 1000 "
        "is allocated from its first share (the paper's rule). fragmented = the paper's F(M): "
        "free GPU capacity that the workload's GPU pod shapes, weighted by frequency, cannot "
        "use on the node it is on (shape does not fit the node at all: all of its free GPUs; "
        "else the partly used GPUs it cannot use) / all GPU capacity."
    )


def study_text(results: Sequence[VariantResult], config: StudyConfig,
               modes: Sequence[FitMode]) -> str:
    parts = [rules(config)]
    for result in results:
        head = ["fill"] + [f"unallocated {LABEL[m]}" for m in modes] + [
            f"fragmented {LABEL[m]}" for m in modes] + [
            f"failed arrivals {LABEL[m]}" for m in modes]
        rows = [head]
        for fill in result.levels():
            row = [f"{fill:.1f}"]
            for attribute, form in (("unallocated", "{:.3f}"), ("fragmented", "{:.3f}"),
                                    ("failed", "{:.0f}")):
                for mode in modes:
                    mark = "*" if result.carried(mode, fill) else ""
                    row.append(form.format(result.mean(mode, fill, attribute)) + mark)
            rows.append(row)
        stops = "; ".join(
            f"{LABEL[m]}: {c.arrivals} arrivals, {c.failed} without a node"
            + (f" ({c.hub_misses} sent by the hub to a cluster with no node for them)"
               if c.hub_misses else "") + f", stopped: {c.stop}"
            for m in modes for c in result.curves[m])
        parts.append(f"variant {result.variant} — {result.description}; F(M) over the "
                     f"{config.shapes} most frequent GPU pod shapes "
                     f"({result.shape_coverage:.0%} of GPU pods)\n{_table(rows)}\n{stops}")
    return "\n\n".join(parts) + "\n"


def study_json(results: Sequence[VariantResult], config: StudyConfig,
               modes: Sequence[FitMode]) -> dict[str, object]:
    return {
        "config": {"clusters": config.clusters, "repeats": config.repeats,
                   "seed": config.seed, "give_up": config.give_up,
                   "max_fill": config.max_fill, "shapes": config.shapes},
        "variants": [{
            "variant": r.variant,
            "description": r.description,
            "levels": [{
                "fill": fill,
                **{LABEL[m]: {a: r.mean(m, fill, a)
                              for a in ("unallocated", "fragmented", "allocated", "failed")}
                   | {"after_stop": r.carried(m, fill)} for m in modes},
            } for fill in r.levels()],
            "runs": {LABEL[m]: [{"arrivals": c.arrivals, "failed": c.failed,
                                 "hub_misses": c.hub_misses, "stop": c.stop}
                                for c in r.curves[m]] for m in modes},
        } for r in results],
    }


def study_plot(results: Sequence[VariantResult], out: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no study plot"
    if not results:
        return ""
    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 3.8), sharey=True,
                             squeeze=False)
    for ax, result in zip(axes[0], results, strict=True):
        levels = result.levels()
        for mode, colour in ((FitMode.NODE_AWARE, "tab:blue"), (FitMode.SUMMED, "tab:red")):
            ax.plot(levels, [result.mean(mode, f, "unallocated") for f in levels],
                    color=colour, label=f"{LABEL[mode]}: unallocated")
            ax.plot(levels, [result.mean(mode, f, "fragmented") for f in levels],
                    color=colour, ls="--", lw=0.8, label=f"{LABEL[mode]}: fragmented")
        ax.set_title(result.variant, fontsize=9)
        ax.set_xlabel("arrived GPU demand / fleet GPUs")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("share of the fleet's GPUs")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = out / "fragmentation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"study plot: {path}"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
