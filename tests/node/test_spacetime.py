"""The space-time diagram (raftpoint.cli.spacetime): lanes, marks, arrows and cuts where
the data puts them, every name escaped; and the page as a real browser builds it."""
from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from coordinator.core.history import Dependency
from raftpoint.cli.spacetime import Cut, Lane, Mark, Picture, html_page, svg

NS = {"s": "http://www.w3.org/2000/svg"}
HOSTILE = '<script>alert("x")</script>&amp;'
CHROMIUM = Path("/usr/bin/chromium")


def three_agents() -> Picture:
    """p, q, r; q received (interval 2) what p sent after its checkpoint 2 (interval 3),
    so the line takes q back to 1; r's checkpoint 2 is forced and still pending."""
    return Picture(
        "group g", [Lane("p", "alive"), Lane("q", "failed"), Lane("r")],
        [Mark("p", 1), Mark("p", 2), Mark("q", 1), Mark("q", 2, useless=True), Mark("r", 2, "forced", stable=False)],
        [Dependency("p", 3, "q", 2, "m1"), Dependency("q", 1, "r", 1, "m2"), Dependency("r", 1, "p", 1, "m3")],
        Cut("recovery line", {"p": 2, "q": 1, "r": 0}),
        [Cut("savepoint before", {"p": 1, "q": 1, "r": 0}), Cut("savepoint one-lane", {"p": 1})])


def parsed(picture: Picture) -> ET.Element:
    return ET.fromstring(svg(picture).encode())


def of_class(root: ET.Element, css: str) -> list[ET.Element]:
    return [g for g in root.iterfind(".//s:g", NS) if css in g.get("class", "").split()]


def vertices(cut: ET.Element) -> list[tuple[float, float]]:
    points = cut.find("s:polyline", NS).get("points")
    return [(float(x), float(y)) for x, y in (p.split(",") for p in points.split())]


def test_one_lane_per_agent_one_mark_per_checkpoint_one_arrow_per_message() -> None:
    root = parsed(three_agents())
    assert [g.get("data-agent") for g in of_class(root, "lane")] == ["p", "q", "r"]
    marks = {(g.get("data-agent"), int(g.get("data-index"))): g.get("class").split() for g in of_class(root, "checkpoint")}
    assert set(marks) == {("p", 1), ("p", 2), ("q", 1), ("q", 2), ("r", 2)}, marks
    assert "useless" in marks[("q", 2)] and "useless" not in marks[("q", 1)]
    assert {"forced", "pending"} <= set(marks[("r", 2)]) and {"basic", "stable"} <= set(marks[("p", 1)])
    arrows = [(g.get("data-sender"), g.get("data-receiver")) for g in of_class(root, "message")]
    assert arrows == [("p", "q"), ("q", "r"), ("r", "p")]
    assert len(root.findall(".//s:line[@marker-end]", NS)) == 3 + 1  # the legend's arrow too


def test_arrows_run_from_the_send_interval_to_the_receive_interval() -> None:
    """Interval j is drawn between checkpoints j-1 and j: m1, sent by p after its
    checkpoint 2 and received by q before its checkpoint 2, points back left."""
    root = parsed(three_agents())
    x = {(g.get("data-agent"), int(g.get("data-index"))): float(g.get("data-x")) for g in of_class(root, "checkpoint")}
    m1 = of_class(root, "message")[0].find("s:line", NS)
    x1, x2 = float(m1.get("x1")), float(m1.get("x2"))
    assert x[("p", 2)] < x1 and x[("q", 1)] < x2 < x[("q", 2)] and x2 < x1, (x1, x2, x)


def test_the_recovery_line_passes_through_its_checkpoints_lane_by_lane() -> None:
    root = parsed(three_agents())
    lane_y = {g.get("data-agent"): float(g.find("s:line", NS).get("y1")) for g in of_class(root, "lane")}
    at = {(float(g.get("data-x")), float(g.get("data-y"))): (g.get("data-agent"), int(g.get("data-index")))
          for g in of_class(root, "checkpoint")}
    start = {y: (agent, 0) for agent, y in lane_y.items()}  # checkpoint 0: where the lane starts
    lane_x0 = float(of_class(root, "lane")[0].find("s:line", NS).get("x1"))
    [line] = of_class(root, "recovery-line")
    through = [at.get((x, y)) or (start[y] if x == lane_x0 else None) for x, y in vertices(line)]
    assert through == [("p", 2), ("q", 1), ("r", 0)], (vertices(line), at)
    assert line.get("data-cut") == "p:2 q:1 r:0"


def test_each_savepoint_is_a_labelled_line_even_on_one_lane() -> None:
    root = parsed(three_agents())
    savepoints = of_class(root, "savepoint")
    assert [g.get("data-name") for g in savepoints] == ["savepoint before", "savepoint one-lane"]
    assert [g.find("s:text", NS).text for g in savepoints] == ["savepoint before", "savepoint one-lane"]
    assert len(vertices(savepoints[0])) == 3 and len(vertices(savepoints[1])) == 2
    assert len({x for x, _ in vertices(savepoints[1])}) == 1  # a vertical bar on p's lane


def test_a_legend_names_every_kind_of_mark_and_line() -> None:
    [legend] = of_class(parsed(three_agents()), "legend")
    words = {t.text for t in legend.iterfind(".//s:text", NS)}
    assert {"basic", "forced", "coordinated", "pending (not stable)", "useless (on a Z-cycle)", "message",
            "recovery line", "savepoint"} <= words, words


def test_hostile_names_stay_text() -> None:
    """Names in text, tooltips and attributes: escaped, never markup; control characters
    XML cannot hold are replaced rather than making the file unreadable."""
    name = HOSTILE + "\x07"
    picture = Picture(name, [Lane(name, name), Lane("q")], [Mark(name, 1)], [Dependency(name, 2, "q", 1, name)],
                      Cut(name, {name: 1, "q": 0}), [Cut(name, {name: 1})])
    for text in (svg(picture), html_page([picture])):
        assert "<script" not in text and "\x07" not in text
    root = parsed(picture)
    assert not root.findall(".//s:script", NS) and not root.findall(".//script")
    assert [g.get("data-agent") for g in of_class(root, "lane")] == [HOSTILE + "\ufffd", "q"]
    assert root.find("s:text", NS).text == HOSTILE + "\ufffd"
    assert {e.tag.split("}")[1] for e in root.iter()} <= {
        "svg", "defs", "marker", "path", "g", "title", "line", "text", "rect", "polygon", "circle", "polyline"}


def test_an_empty_group_is_still_a_picture() -> None:
    root = parsed(Picture("group empty", []))
    assert not of_class(root, "lane") and of_class(root, "legend") and float(root.get("width")) > 0


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no browser at {CHROMIUM} (Debian's chromium package) to render with")
def test_a_browser_builds_the_svg_of_the_page(tmp_path: Path) -> None:
    page = tmp_path / "group.html"
    drawn = three_agents()
    page.write_text(html_page([Picture(HOSTILE, [*drawn.lanes, Lane(HOSTILE)], drawn.marks, drawn.messages,
                                       drawn.recovery_line, drawn.savepoints)]))
    profile = tmp_path / "profile"
    proc = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout  # as the browser serialises the elements it built: text would show as &lt;g ...
    assert dom.count("<svg ") == 1 and dom.count('<g class="lane"') == 4, dom[:2000]
    assert dom.count('<g class="message"') == 3 and dom.count('<g class="checkpoint ') == 5, dom[:2000]
    assert dom.count('<g class="recovery-line"') == 1 and dom.count('<g class="savepoint"') == 2, dom[:2000]
    assert dom.count("<polyline ") == 3, dom[:2000]
    assert "<script" not in dom and dom.count("&lt;script&gt;") >= 3, dom  # title, heading, lane label: text
    shutil.rmtree(profile, ignore_errors=True)
