"""``OUT/report.html``: one page of a ``track`` run that opens in a
browser from the disk (no server, no network): the results table, IDF1
against the gate for each model (its self-calibrated and best gates
marked), and, for the sequences drawn with ``--render``, each video with
each person's timeline (which track had them, frame by frame) whose
moments (an identity switch, a person without a track) seek the video
when clicked.
"""

import html
import json
import math
import os

from cosine_metric_learning import render, track_report, tracking

PAGE_NAME = "report.html"
# the plot's size in pixels, and its margins
PLOT_WIDTH, PLOT_HEIGHT, MARGIN = 420, 220, 36

_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #bbb; padding: 2px 8px; text-align: right; }
td:first-child, th:first-child { text-align: left; }
.timeline { position: relative; height: 14px; background: #eee;
            margin: 2px 0 2px 7em; }
.timeline span { position: absolute; top: 0; height: 14px; }
.person { position: absolute; left: 0; top: 0; font-size: 12px; }
.row { position: relative; }
button.moment { position: absolute; top: -2px; width: 6px; height: 18px;
                padding: 0; border: 1px solid #000; cursor: pointer; }
button.switch { background: #d00; z-index: 2; }
button.missed { background: #fff; width: 4px; z-index: 1; }
video { max-width: 100%; display: block; }
"""

_SCRIPT = """
document.querySelectorAll('.moment').forEach(function (b) {
  b.addEventListener('click', function () {
    var video = document.getElementById(b.dataset.video);
    video.pause();
    video.currentTime = parseFloat(b.dataset.time);
  });
});
document.querySelectorAll('video').forEach(function (v) {
  v.addEventListener('error', function () {
    console.error('the video ' + v.getAttribute('src') + ' did not load');
  });
});
"""


def _rgb(track):
    if track is None:
        return "#bbb"
    b, g, r = render.colour(track)
    return f"rgb({r},{g},{b})"


def _table(summary):
    """The rows of :func:`track_report.table_rows` as an HTML table."""
    columns = ("model", "gate", "budget", *tracking.METRICS)
    head = "".join(f"<th>{m}</th>" for m in columns)
    rows = []
    for label, gate, budget, combined in track_report.table_rows(summary):
        values = "".join(
            f"<td>{combined[m]}</td>" if m == "IDSW"
            else f"<td>{100 * combined[m]:.1f}</td>"
            for m in tracking.METRICS)
        rows.append(f"<tr><td>{html.escape(label)}</td><td>{gate}</td>"
                    f"<td>{budget}</td>{values}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _plot(entry, number):
    """An SVG of IDF1 against the gate (log scale) at the first run's
    budget; None where fewer than two gates were tried."""
    budget = entry["runs"][0]["parameters"]["nn_budget"]
    points = sorted(
        (r["parameters"]["max_cosine_distance"],
         r["metrics"]["COMBINED"]["IDF1"]) for r in entry["runs"]
        if r["parameters"]["nn_budget"] == budget
        and "COMBINED" in r["metrics"]
        and r["parameters"]["max_cosine_distance"] > 0)
    if len(points) < 2:
        return None
    low, high = math.log10(points[0][0]), math.log10(points[-1][0])
    span = max(high - low, 1e-9)

    def x(gate):
        return MARGIN + (math.log10(gate) - low) / span * (
            PLOT_WIDTH - 2 * MARGIN)

    def y(idf1):
        return PLOT_HEIGHT - MARGIN - idf1 * (PLOT_HEIGHT - 2 * MARGIN)

    line = " ".join(f"{x(g):.1f},{y(v):.1f}" for g, v in points)
    parts = [f'<svg class="plot" id="plot-{number}" width="{PLOT_WIDTH}" '
             f'height="{PLOT_HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
             f'<rect x="{MARGIN}" y="{MARGIN}" '
             f'width="{PLOT_WIDTH - 2 * MARGIN}" '
             f'height="{PLOT_HEIGHT - 2 * MARGIN}" fill="none" '
             'stroke="#999"/>',
             f'<polyline points="{line}" fill="none" stroke="#36c" '
             'stroke-width="2"/>']
    parts += [f'<circle class="point" cx="{x(g):.1f}" cy="{y(v):.1f}" r="3"'
              f' fill="#36c"><title>gate {g:g}: IDF1 {100 * v:.1f}</title>'
              '</circle>' for g, v in points]
    best = entry.get("best")
    if best is not None:
        g = best["parameters"]["max_cosine_distance"]
        v = best["metrics"]["COMBINED"]["IDF1"]
        if g > 0 and best["parameters"]["nn_budget"] == budget:
            parts.append(f'<circle class="best" cx="{x(g):.1f}" '
                         f'cy="{y(v):.1f}" r="6" fill="none" stroke="#d00"'
                         f' stroke-width="2"><title>best: gate {g:g}, IDF1 '
                         f'{100 * v:.1f}</title></circle>')
    calibrated = (entry.get("self_calibrated_gate") or {}).get("gate")
    if calibrated and 10 ** low <= calibrated <= 10 ** high:
        cx = x(calibrated)
        parts.append(f'<line class="calibrated" x1="{cx:.1f}" y1="{MARGIN}"'
                     f' x2="{cx:.1f}" y2="{PLOT_HEIGHT - MARGIN}" '
                     'stroke="#090" stroke-dasharray="4 3"><title>'
                     f'self-calibrated gate {calibrated:.4g}</title></line>')
    for value in (0.0, 0.5, 1.0):  # the IDF1 axis
        parts.append(f'<text x="{MARGIN - 4}" y="{y(value) + 4:.1f}" '
                     f'font-size="10" text-anchor="end">{value:g}</text>')
    for gate in (points[0][0], points[-1][0]):  # the ends of the gates
        parts.append(f'<text x="{x(gate):.1f}" y="{PLOT_HEIGHT - MARGIN + 14}"'
                     f' font-size="10" text-anchor="middle">{gate:g}</text>')
    parts.append(f'<text x="{MARGIN}" y="{PLOT_HEIGHT - 6}" font-size="11">'
                 'IDF1 against the gate (log scale); red: the best, '
                 'green: the self-calibrated gate</text></svg>')
    return "".join(parts)


def _timelines(drawn, video_id):
    """Each person's timeline, its moments as buttons that seek the
    video."""
    frames = max(drawn["num_frames"], 1)
    rate = drawn["frame_rate"]
    rows = []
    for person, spans in sorted(drawn["timelines"].items(),
                                key=lambda kv: int(kv[0])):
        bars = "".join(
            f'<span style="left:{100 * (a - 1) / frames:.3f}%;width:'
            f'{100 * (b - a + 1) / frames:.3f}%;background:{_rgb(t)}" '
            f'title="frames {a}-{b}: '
            f'{"no track" if t is None else f"track {t}"}"></span>'
            for a, b, t in spans)
        buttons = "".join(
            f'<button class="moment {m["kind"]}" data-video="{video_id}" '
            f'data-time="{(m["frame"] - 1) / rate:.3f}" '
            f'style="left:{100 * (m["frame"] - 1) / frames:.3f}%" '
            f'title="frame {m["frame"]}: {html.escape(render.describe(m))}">'
            '</button>'
            for m in drawn["moments"] if str(m["person"]) == str(person))
        rows.append(f'<div class="row"><span class="person">person {person}'
                    f'</span><div class="timeline">{bars}{buttons}</div>'
                    '</div>')
    return "".join(rows)


def write_page(path, summary, drawn):
    """Write the page to ``path``. ``drawn``: ``{model: {sequence:
    {"video": path relative to the page, "moments", "timelines",
    "num_frames", "frame_rate"}}}`` of the sequences rendered."""
    settings = {k: v for k, v in summary["parameters"].items()
                if k != "sequences"}
    body = ["<h1>Tracking report</h1>",
            f"<p>{html.escape(json.dumps(settings))}</p>", _table(summary)]
    videos = 0
    for number, (model, entry) in enumerate(summary["models"].items()):
        body.append(f"<h2>{html.escape(entry['label'])}</h2>")
        plot = _plot(entry, number) if "COMBINED" in entry["runs"][0][
            "metrics"] else None
        if plot is not None:
            body.append("<h3>IDF1 against the gate</h3>" + plot)
        for sequence, one in drawn.get(model, {}).items():
            videos += 1
            video_id = f"video-{videos}"
            body.append(
                f"<h3>{html.escape(sequence)}</h3>"
                f'<video id="{video_id}" src="{html.escape(one["video"])}" '
                'controls muted preload="auto"></video>')
            if one["timelines"]:
                switches = sum(m["kind"] == render.SWITCH
                               for m in one["moments"])
                body.append(
                    f"<p>{switches} identity switches (red), "
                    f"{len(one['moments']) - switches} times a person lost "
                    "their track (white); click one to see it</p>"
                    + _timelines(one, video_id))
    page = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>Tracking report</title><style>{_STYLE}</style></head>"
            f"<body>{''.join(body)}<script>{_SCRIPT}</script></body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path


def relative(path, start):
    """``path`` relative to the folder ``start``, with forward slashes
    (as a page links it)."""
    return os.path.relpath(path, start).replace(os.sep, "/")
