"""``adapt.json``: what a run of ``adapt`` records (its inputs, settings
and method, then its numbers), whether a rerun may continue the run in a
folder, and the report printed from it."""

import json
import os
import shutil

from cosine_metric_learning import files, gates
from cosine_metric_learning.errors import ArgumentError, UsageError

REPORT_NAME = "adapt.json"
REPORT = files.json_kind({"model", "checkpoint", "sequences", "settings",
                          "before", "after"},
                         "a report of this command (a JSON object with "
                         "'model', 'checkpoint', 'sequences', 'settings', "
                         "'before' and 'after')")


def _digest(path):
    """The SHA-256 of a file's bytes, or None where it does not exist."""
    return files.digest(path) if os.path.isfile(path) else None


def inputs(model, prefix, sequences, method, settings):
    """What a run is made of, as ``adapt.json`` records it: the model (the
    checkpoint it resolved to, and a digest of its index), the sequences
    (their folders and ``det.txt`` digests) and the settings."""
    prefix = os.path.abspath(prefix)
    return {"model": model, "checkpoint": {
        "path": prefix, "index_sha256": _digest(prefix + ".index")},
        "sequences": [{"name": s.name, "path": os.path.realpath(s.path),
                       "detections_sha256": _digest(os.path.join(
                           s.path, "det", "det.txt"))} for s in sequences],
        "settings": settings, "method": method}


def earlier_run(output_dir, own):
    """The inputs ``adapt.json`` records of the run in ``output_dir``; None
    for a new or empty folder; UsageError for anything else (a file, a
    folder holding what this command did not write: names not in
    ``own``)."""
    if os.path.lexists(output_dir) and not os.path.isdir(output_dir):
        raise ArgumentError("output_dir", output_dir, "it is a file; "
                            "expected a new or empty folder, or an "
                            "earlier output of this command")
    if not os.path.isdir(output_dir):
        files.check_writable(os.path.dirname(os.path.abspath(output_dir)),
                             output_dir)
        return None
    names = sorted(os.listdir(output_dir))
    if not names:
        return None
    extra = [n for n in names if n not in own]
    if extra or REPORT_NAME not in names:
        what = (f"{extra[0]}, which this command did not write" if extra
                else f"{names[0]} but no {REPORT_NAME}, so it is not a run "
                "of this command")
        raise UsageError(f"refusing to write into {output_dir}: it holds "
                         f"{what}; choose a new or empty --output_dir")
    path = os.path.join(output_dir, REPORT_NAME)
    files.check_output(path, REPORT)
    with open(path) as f:
        return json.load(f)


def check_same(output_dir, recorded, current, settings):
    """UsageError naming the first input of ``current`` that differs from
    the run ``recorded`` in ``output_dir`` (its method, or one of the
    ``settings`` that shape it): that run is not continued."""
    def refuse(what):
        raise UsageError(f"refusing to continue the run in {output_dir}: "
                         f"{what}; give a new --output_dir for a new run")

    was, now = recorded["checkpoint"], current["checkpoint"]
    if was["path"] != now["path"]:
        refuse(f"it adapts {was['path']}, not --model={current['model']}"
               + (f" ({now['path']})" if now["path"] != current["model"]
                  else ""))
    if was["index_sha256"] != now["index_sha256"]:
        refuse(f"the checkpoint {now['path']} has changed since it "
               "began")
    was = [(s["name"], s["path"]) for s in recorded["sequences"]]
    now = [(s["name"], s["path"]) for s in current["sequences"]]
    if was != now:
        refuse("it adapts on " + ", ".join(p for _, p in was)
               + ", not on " + ", ".join(p for _, p in now))
    for old, new in zip(recorded["sequences"], current["sequences"]):
        if old["detections_sha256"] != new["detections_sha256"]:
            refuse(f"the detections of {new['name']} (det/det.txt) have "
                   "changed since it began")
    for name in settings:
        old, new = recorded["settings"].get(name), current["settings"][name]
        if old != new:
            refuse(f"it ran with --{name}={old}, not --{name}={new}")
    method = recorded.get("method")
    if method != current["method"]:
        changed = sorted(k for k in current["method"]
                         if (method or {}).get(k) != current["method"][k])
        refuse("an earlier release made it, fine-tuning otherwise ("
               + ", ".join(f"{k}: {(method or {}).get(k)} then, "
                           f"{current['method'][k]} now" for k in changed)
               + ")")


def write_report(path, report):
    files.write_atomically(path, lambda f: json.dump(report, f, indent=1),
                           REPORT)


def remove_new_run(output_dir, created):
    """Remove what a new run wrote in ``output_dir`` (and the folder, if
    it made it)."""
    for name in (REPORT_NAME, "tracklets"):
        path = os.path.join(output_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.isfile(path):
            os.remove(path)
    if created and not os.listdir(output_dir):
        os.rmdir(output_dir)


def format_report(report):
    tuning = report["fine_tuning"]
    lines = [f"{report['tracklets']['identities']} tracklets "
             f"({report['tracklets']['crops']} crops, "
             f"{tuning['pairs_seen_together']} pairs seen together; "
             f"{len(tuning['linked']['links'])} linked across gaps: "
             f"{tuning['linked']['identities']} identities), "
             f"{report['number_of_steps']} steps from {report['model']}",
             f"{'':8s} {'gate':>7s} {'false accepts':>14s} "
             f"{'false rejects':>14s} {'IDF1':>6s}"]
    for when in ("before", "after"):
        numbers = report[when]
        gate = numbers["self_calibrated_gate"]
        idf1 = numbers.get("IDF1")
        lines.append(
            f"{when:8s} {gate['gate']:7.4f} "
            f"{100 * gate['false_accept']:13.1f}% "
            f"{100 * gate['false_reject']:13.1f}% "
            + (f"{100 * idf1:6.1f}" if idf1 is not None else f"{'-':>6s}"))
    held = report["held_out"]
    lines.append(f"held-out frames ({held.get('tracklets', 0)} tracklets): "
                 f"{held['verdict']}; {held['why']}")
    kept = report["kept"]
    which = "adapted model" if kept == "adapted" else "model it started from"
    lines.append(f"kept: the {which} ({report['kept_checkpoint']}): "
                 f"{report['kept_why']}")
    gate = report["after" if kept == "adapted" else "before"][
        "self_calibrated_gate"]["gate"]
    lines.append("its gate:")
    lines.extend(f"  {tracker}: {setting}"
                 for tracker, setting in gates.gate_settings(gate,
                                                             notes=True))
    if report["export"]:
        lines.append(f"wrote {report['export']}")
    return "\n".join(lines)
