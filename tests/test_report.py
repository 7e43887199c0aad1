"""Tracks drawn on the video, the moments the tracker lost a person, and
the report page, opened in a real browser (headless Chromium)."""

import json
import os
import shutil

import numpy as np
import pytest

from cosine_metric_learning import mot_sequences, render, report_page, track
from cosine_metric_learning.datasets import synthetic_mot


def test_moments_and_timelines_of_hand_made_tracks():
    """Person 1 is tracked by 5, lost for a frame, then found by 6 (a
    miss, then a switch); person 2 keeps 7 throughout, though a box of 8
    overlaps them as well in frame 2 (the last frame's track is kept)."""
    gt = np.array([[f, p, x, 0, 10, 20, 1, 1, 1] for f in (1, 2, 3, 4)
                   for p, x in ((1, 0), (2, 100))], float)
    results = np.array([
        [1, 5, 0, 0, 10, 20], [2, 5, 1, 0, 10, 20], [4, 6, 0, 0, 10, 20],
        [1, 7, 100, 0, 10, 20], [2, 7, 100, 0, 10, 20],
        [2, 8, 101, 0, 10, 20], [3, 7, 100, 0, 10, 20],
        [4, 7, 100, 1, 10, 20]], float)
    found = render.moments(results, gt, 4)
    assert found == [
        {"frame": 3, "kind": render.MISSED, "person": 1, "track": None,
         "was": 5},
        {"frame": 4, "kind": render.SWITCH, "person": 1, "track": 6,
         "was": 5}]
    assert render.timelines(results, gt, 4) == {
        1: [[1, 2, 5], [3, 3, None], [4, 4, 6]], 2: [[1, 4, 7]]}
    # a box overlapping less than half is no match
    assert render.moments(results[:1] + [0, 0, 6, 0, 0, 0], gt[:1], 1)[0][
        "kind"] == render.MISSED
    assert render.describe(found[1]) == "person 1: track 5 -> 6"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """``track --render`` of a synthetic crossing scene with random
    features (its identities switch) and the ground truth's (a sweep:
    a plot)."""
    root = tmp_path_factory.mktemp("report")
    folder = synthetic_mot.write_mot_sequence(str(root / "seqs"),
                                              num_pairs=2, num_frames=120,
                                              seed=5)
    sequence = mot_sequences.read_sequence(folder)
    output = str(root / "out")
    summary = track.evaluate([track.NONE, track.IDENTITY], [sequence], "det",
                             output, sweep=True, render=True)
    return sequence, output, summary


def test_render_writes_a_video_of_every_frame_and_its_moments(rendered):
    import cv2
    sequence, output, summary = rendered
    _, extension = render.codec()
    video = os.path.join(output, "none", sequence.name + extension)
    capture = cv2.VideoCapture(video)
    count = 0
    while capture.grab():
        count += 1
    capture.release()
    assert count == sequence.num_frames
    listed = json.load(open(os.path.join(output, "none",
                                         sequence.name + ".moments.json")))
    # the moments are those of the results the command scored
    results = np.loadtxt(os.path.join(
        summary["models"][track.NONE]["runs"][0]["results"],
        sequence.name + ".txt"), delimiter=",")[:, :6]
    truth = sequence.ground_truth[mot_sequences.considered(
        sequence.ground_truth)]
    expected = render.moments(results, truth, sequence.num_frames)
    assert [(m["frame"], m["kind"], m["person"]) for m in listed[
        "moments"]] == [(m["frame"], m["kind"], m["person"])
                        for m in expected]
    assert any(m["kind"] == render.SWITCH for m in listed["moments"])
    assert all(m["time"] == pytest.approx((m["frame"] - 1)
                                          / listed["frame_rate"], abs=1e-3)
               for m in listed["moments"])
    for name in (f"none/{sequence.name}{extension}",
                 f"none/{sequence.name}.moments.json",
                 report_page.PAGE_NAME):
        assert name in json.load(open(os.path.join(
            output, track.SUMMARY_NAME)))["files"]


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def page_problems(page_path):
    """What is wrong with the page in headless Chromium: console errors, a
    plot without points, a video that did not load, a moment that does
    not seek its video. Empty when all is well."""
    from playwright.sync_api import sync_playwright
    problems = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(),
                                    args=["--no-sandbox"])
        page = browser.new_page()
        page.on("console", lambda m: problems.append(m.text)
                if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto("file://" + os.path.abspath(page_path))
        page.wait_for_load_state("load")
        if page.locator("svg.plot circle.point").count() < 2:
            problems.append("no plot with points")
        videos = page.locator("video")
        if videos.count() == 0:
            problems.append("no video")
        for k in range(videos.count()):
            try:
                page.wait_for_function(
                    "v => v.readyState >= 2 && v.videoWidth > 0",
                    arg=videos.nth(k).element_handle(), timeout=15000)
            except Exception:
                problems.append(f"video {k} did not load")
        switch = page.locator("button.moment.switch").first
        if switch.count() == 0:
            problems.append("no identity switch in the timeline")
        elif not problems:
            wanted = float(switch.get_attribute("data-time"))
            video = page.locator("#" + switch.get_attribute("data-video"))
            switch.click()
            try:
                page.wait_for_function(
                    "([v, t]) => Math.abs(v.currentTime - t) < 0.2 && "
                    "!v.seeking", arg=[video.element_handle(), wanted],
                    timeout=15000)
            except Exception:
                problems.append("the click did not seek the video to "
                                f"{wanted} s")
        browser.close()
    return problems


@pytest.mark.skipif(_chromium() is None, reason="no Chromium installed "
                    "(Debian: apt-get install chromium)")
def test_the_report_page_in_a_browser(rendered, tmp_path):
    pytest.importorskip("playwright", reason="needs the test extra's "
                        "playwright")
    _, output, _ = rendered
    page = os.path.join(output, report_page.PAGE_NAME)
    assert page_problems(page) == []
    # the same checks fail on a page whose video is gone and whose plot
    # was never drawn
    broken = tmp_path / "broken"
    shutil.copytree(output, broken)
    for root, _, names in os.walk(broken):
        for name in names:
            if name.endswith(render.codec()[1]):
                os.remove(os.path.join(root, name))
    text = (broken / report_page.PAGE_NAME).read_text()
    (broken / report_page.PAGE_NAME).write_text(
        text.replace('class="plot"', 'class="gone"'))
    problems = page_problems(str(broken / report_page.PAGE_NAME))
    assert "no plot with points" in problems
    assert any("did not load" in p for p in problems), problems
