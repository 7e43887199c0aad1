"""What ``track`` reports: the results table and each model's gates."""

import os
import shlex

from cosine_metric_learning import appearance, gates, tracking


def table_rows(summary):
    """``(label, gate, budget, combined metrics)`` of each row of the
    results table: a row per model, its default setting and, swept, its
    best (the gate ``-`` for a model without appearance); runs of no
    scored sequence are left out. The text table and the report page
    show these rows."""
    for model, entry in summary["models"].items():
        shown = [("", entry["runs"][0])]
        best = entry.get("best")
        if best is not None and best is not entry["runs"][0]:
            shown.append((" (best)", best))
        for suffix, run in shown:
            combined = run["metrics"].get("COMBINED")
            if combined is None:
                continue
            p = run["parameters"]
            gate = ("-" if model in appearance.NO_APPEARANCE
                    else f"{p['max_cosine_distance']:g}")
            yield entry["label"] + suffix, gate, p["nn_budget"], combined


def format_table(summary):
    """The rows of :func:`table_rows` as text."""
    header = (f"{'model':32s} {'gate':>6s} {'budget':>6s} "
              + " ".join(f"{m:>6s}" for m in tracking.METRICS))
    lines = [header, "-" * len(header)]
    for label, gate, budget, combined in table_rows(summary):
        values = " ".join(
            f"{combined[m]:6d}" if m == "IDSW"
            else f"{100 * combined[m]:6.1f}" for m in tracking.METRICS)
        lines.append(f"{label[-32:]:32s} {gate:>6s} {budget:>6d} {values}")
    return "\n".join(lines)


def format_gates(entry, given, model=None, videos=(), sequences=0):
    """A model's gates: self-calibrated (in each tracker's convention),
    the best of the sweep with its Deep SORT command line (paths quoted
    for the shell), and the one found on the ground truth; ``given``: the
    gate asked for (a number, or :data:`gates.AUTO`); ``videos``: the
    names of the ``sequences`` (a count) whose frames are in a video,
    which Deep SORT's application cannot read (it reads ``img1/``).
    :data:`appearance.IDENTITY` (``model``) has none of them: its features
    are made from the ground truth."""
    if model == appearance.IDENTITY:
        lines = [
            "  no self-calibrated gate and no deep_sort_app line: its "
            "features are made from the ground truth (0 apart within a "
            "track, about 1 between tracks), not from the images"
            + (f"; tracked at Deep SORT's "
               f"{tracking.DEFAULTS['max_cosine_distance']:g} for "
               "--max_cosine_distance=auto" if given == gates.AUTO else "")]
        if "best" in entry:
            best = entry["best"]
            lines.append(
                "  best --max_cosine_distance="
                f"{best['parameters']['max_cosine_distance']:g} (IDF1 "
                f"{100 * best['metrics']['COMBINED']['IDF1']:.1f})")
        return "\n".join(lines)
    lines = []
    calibrated = entry.get("self_calibrated_gate")
    if calibrated is None:
        lines.append("  self-calibrated gate: none (no tracklet pairs)")
    else:
        lines.append(
            "  self-calibrated gate " + gates.describe_gate(calibrated)
            + ("; used, as --max_cosine_distance=auto asks"
               if given == gates.AUTO else ""))
        lines.extend(f"    {tracker}: {setting}" for tracker, setting
                     in gates.gate_settings(calibrated["gate"],
                                            notes=True))
    if "best" in entry:
        best = entry["best"]["parameters"]
        gate = entry.get("ground_truth_gate")
        lines.append(
            f"  best --max_cosine_distance={best['max_cosine_distance']:g} "
            f"--nn_budget={best['nn_budget']} (IDF1 "
            f"{100 * entry['best']['metrics']['COMBINED']['IDF1']:.1f}); "
            "gate on the ground truth: " + (
                f"{gate:.4g}" if gate is not None else
                f"none (no track seen {gates.GATE_FRAME_GAP} frames apart "
                "beside another in a frame)"))
        detection_file = shlex.quote(
            os.path.join(entry["folder"], "SEQUENCE") + ".npy")
        lines.append(
            "  python deep_sort_app.py --sequence_dir=SEQUENCE "
            f"--detection_file={detection_file} "
            f"--min_confidence={best['min_confidence']:g} "
            f"--nms_max_overlap={best['nms_max_overlap']:g} "
            f"--max_cosine_distance={best['max_cosine_distance']:g} "
            f"--nn_budget={best['nn_budget']}")
        if videos:
            note = ("  Deep SORT's deep_sort_app.py reads the frames from "
                    f"img1/, which {', '.join(videos)} lack (their frames are "
                    "in a video): datasets.video --frames=jpg writes them")
            lines[-1:] = [note] + (lines[-1:] if len(videos) < sequences
                                   else [])
    return "\n".join(lines)
