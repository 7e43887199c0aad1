"""The command of :mod:`datasets.tracklets` (``python -m
cosine_metric_learning.datasets.tracklets``, whose docstring tells what
it does): its flags, its report, and its run."""

import dataclasses

from absl import app

from cosine_metric_learning import commands, gates, mot_sequences, tracking
from cosine_metric_learning.commands import setting
from cosine_metric_learning.datasets import tracklets
from cosine_metric_learning.errors import parse_flags


def format_report(manifest, output_dir):
    """What was kept and dropped, per sequence and in total, and the
    gate."""
    lines = [f"{s['sequence']}: {s['kept']} of {s['boxes']} detections "
             f"kept, {s['identities']} tracklets"
             for s in manifest["sources"]]
    counts = manifest["counts"]
    lines.append(f"kept {counts['kept']} of {sum(counts.values())} "
                 f"detections as {len(manifest['identities'])} tracklets in "
                 f"{output_dir}")
    for reason, text in tracklets.REASONS.items():
        lines.append(f"{counts[reason]:8d} dropped: {text}")
    gate = manifest.get("gate")
    if gate:
        lines.append(f"self-calibrated gate of {manifest['model']}: "
                     + gates.describe_gate(gate))
        lines.extend(f"  {tracker}: {setting}" for tracker, setting
                     in gates.gate_settings(gate["gate"], notes=True))
    return "\n".join(lines)


def main(argv):
    def run():
        config = commands.values(TrackletsConfig)
        cuts = commands.values(tracklets.CutConfig)
        tracking.require_tracker()
        manifest = tracklets.extract(
            mot_sequences.find_sequences(config.sequences), config.output_dir,
            config.model, cuts.track_min_confidence, **cuts.cuts)
        print(format_report(manifest, config.output_dir))
        return 0

    return commands.run(argv, run, [TrackletsConfig, tracklets.CutConfig])


@dataclasses.dataclass
class TrackletsConfig:
    """The flags of the command beside :class:`CutConfig`."""
    sequences: str = setting(
        None, "Comma-separated MOTChallenge sequence folders (img1/ and "
        "det/det.txt), or parents of them.", arguments=("sequence_folders",),
        required=True)
    model: str = setting(
        "none", "Track with this model's features at its self-calibrated "
        "gate (anything encoder.load opens), or none: motion alone.",
        arguments=("path",))
    output_dir: str = setting(
        None, "Where the identity folders go (a new or empty folder, or an "
        "earlier output).", required=True)


def run_command():
    """Define the flags and run the command (the module's ``__main__``)."""
    commands.define([TrackletsConfig, tracklets.CutConfig])
    app.run(main, flags_parser=parse_flags)
