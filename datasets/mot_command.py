"""The command of :mod:`datasets.mot` (``python -m
cosine_metric_learning.datasets.mot``, whose docstring tells what it
does): its flags, its report, and its run."""

import dataclasses

from absl import app

from cosine_metric_learning import commands, mot_sequences
from cosine_metric_learning.commands import setting
from cosine_metric_learning.datasets import mot
from cosine_metric_learning.errors import parse_flags


def format_report(manifest, output_dir):
    """What was kept and dropped, per sequence and in total."""
    lines = []
    for source in manifest["sources"]:
        missing = source["missing_frames"]
        lines.append(f"{source['sequence']}: {source['kept']} of "
                     f"{source['boxes']} boxes kept, "
                     f"{source['identities']} identities" + (
                         f" ({missing} frames of gt.txt missing from img1/)"
                         if missing else ""))
    counts = manifest["counts"]
    total = sum(counts.values())
    lines.append(f"kept {counts['kept']} of {total} boxes as "
                 f"{len(manifest['identities'])} identities in {output_dir}")
    for reason, text in mot.REASONS.items():
        lines.append(f"{counts[reason]:8d} dropped: {text}")
    return "\n".join(lines)


def main(argv):
    def run():
        config = commands.values(MotConfig)
        manifest = mot.convert(
            mot_sequences.find_sequences(config.sequences), config.output_dir,
            classes=mot_sequences.parse_classes(config.classes),
            min_visibility=config.min_visibility,
            min_height=config.min_height, frame_stride=config.frame_stride)
        print(format_report(manifest, config.output_dir))
        return 0

    return commands.run(argv, run, [MotConfig])


@dataclasses.dataclass
class MotConfig:
    """The flags of the command."""
    sequences: str = setting(
        None, "Comma-separated MOTChallenge sequence folders (img1/ and "
        "gt/gt.txt), or parents of them.", arguments=("sequence_folders",),
        required=True)
    output_dir: str = setting(
        None, "Where the identity folders go (a new or empty folder, or an "
        "earlier output).", required=True)
    classes: str = setting(
        ",".join(map(str, mot.DEFAULTS["classes"])), "Classes to keep "
        "(gt.txt's 8th column, comma-separated; MOT17: 1 is a pedestrian; "
        "CVAT: the line of the label in labels.txt), or all.")
    min_visibility: float = setting(
        mot.DEFAULTS["min_visibility"],
        "Drop boxes less visible than this (gt.txt's 9th column).")
    min_height: int = setting(
        mot.DEFAULTS["min_height"], "Drop boxes shorter than this many pixels "
        "inside the frame (the network's input is 128 tall).")
    frame_stride: int = setting(
        mot.DEFAULTS["frame_stride"], "Keep a track's box only when this many "
        "frames passed since its previous kept one (neighbouring frames are "
        "near duplicates; 5 to 10 at 30 frames per second).")


def run_command():
    """Define the flags and run the command (the module's ``__main__``)."""
    commands.define([MotConfig])
    app.run(main, flags_parser=parse_flags)
