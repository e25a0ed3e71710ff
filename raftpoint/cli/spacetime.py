"""A group's space-time diagram as a standalone SVG: plain values in, text out (no I/O).

The picture checkpointing is explained with: one horizontal lane per agent, its
checkpoints as marks along it, each reported message as an arrow from the interval
it was sent in to the interval it was received in, and consistent cuts (the
recovery line, each savepoint) as polylines through one checkpoint per lane.

The x axis is the checkpoint index, not time (the coordinator records no time for
a message): every index any lane holds gets a column, so checkpoints with the same
index line up (BCS's recovery line for index k is then vertical) and a gap in the
indexes takes no room. Interval j, the events after checkpoint j-1, is drawn just
right of column j-1; a message drawn from right to left was received in an
interval older than the one it was sent in, which is how a Z-path looks.

Every name is written as XML text or an attribute value by xml.etree, which escapes
it, and characters XML cannot hold are replaced: a name never becomes markup.
"""
from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from coordinator.core.history import Dependency

SVG_NS = "http://www.w3.org/2000/svg"
KINDS = ("basic", "forced", "coordinated", "initial")
COLUMN = 48  # px between two checkpoint columns
LANE = 56  # px between two lanes
MARK = 12  # a checkpoint mark's side
LABEL_CHARS = 24  # a longer lane label is cut (the full name is in its tooltip)
MARGIN = 16
TITLE_HEIGHT = 28
LEGEND_HEIGHT = 28
CUT_COLOURS = ("#7b1fa2", "#00897b", "#c0ca33", "#5d4037", "#546e7a")  # savepoints, in turn
KIND_FILL = {"basic": "#263238", "forced": "#ef6c00", "coordinated": "#1565c0", "initial": "#9e9e9e"}
# What XML 1.0 cannot hold even escaped: control characters other than tab, newline, CR.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclass(frozen=True)
class Lane:
    """One agent; `note` is said beside its name (its state, e.g. "failed")."""
    agent: str
    note: str = ""


@dataclass(frozen=True)
class Mark:
    """A checkpoint: its kind (one of KINDS), stable or still pending, useless (on a
    Z-cycle: in no consistent global checkpoint) when that is known."""
    agent: str
    index: int
    kind: str = "basic"
    stable: bool = True
    useless: bool = False


@dataclass(frozen=True)
class Cut:
    """A consistent global checkpoint: a checkpoint index per agent (0: its initial state)."""
    name: str
    points: Mapping[str, int]


@dataclass(frozen=True)
class Picture:
    title: str
    lanes: Sequence[Lane]
    marks: Sequence[Mark] = ()
    messages: Sequence[Dependency] = ()  # the reported messages
    recovery_line: Cut | None = None
    savepoints: Sequence[Cut] = ()


def clean(text: str) -> str:
    """`text` as XML can hold it (ElementTree escapes markup but writes control characters as they are)."""
    return _NOT_XML.sub("\ufffd", text)


@dataclass
class _Layout:
    """Where things go: lanes by agent, columns by checkpoint index."""
    picture: Picture
    left: float = 0.0
    lane_y: dict[str, float] = field(default_factory=dict)
    column: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        p = self.picture
        longest = max((len(_label(lane)) for lane in p.lanes), default=0)
        self.left = MARGIN + 7.5 * longest + MARGIN
        self.lane_y = {lane.agent: MARGIN + TITLE_HEIGHT + LANE * (n + 0.5) for n, lane in enumerate(p.lanes)}
        indexes = {0, *(m.index for m in p.marks)}
        for cut in (p.recovery_line, *p.savepoints):
            if cut is not None:
                indexes.update(cut.points.values())
        for m in p.messages:  # interval j sits right of checkpoint j-1: it needs that column
            indexes.update((max(m.send_interval - 1, 0), max(m.receive_interval - 1, 0)))
        self.column = {index: n for n, index in enumerate(sorted(indexes))}

    def x(self, index: int) -> float:
        return self.left + COLUMN * (self.column[index] + 0.5)

    def interval_x(self, interval: int, place: float) -> float:
        """Between the column of checkpoint interval-1 and the next; `place` in (0, 1)
        spreads the interval's events so their arrows do not overlap."""
        return self.x(max(interval - 1, 0)) + COLUMN * (0.15 + 0.7 * place)

    @property
    def width(self) -> float:
        return self.left + COLUMN * (len(self.column) + 1) + MARGIN

    @property
    def lanes_bottom(self) -> float:
        return MARGIN + TITLE_HEIGHT + LANE * len(self.picture.lanes)


def _label(lane: Lane) -> str:
    name = lane.agent if len(lane.agent) <= LABEL_CHARS else lane.agent[:LABEL_CHARS - 1] + "…"
    return f"{name} ({lane.note})" if lane.note else name


def _el(parent: ET.Element, tag: str, text: str | None = None, **attrs: object) -> ET.Element:
    """A child element; attribute names with "_" are written with "-" (stroke_width: stroke-width)."""
    child = ET.SubElement(parent, tag, {k.rstrip("_").replace("_", "-"): _value(v) for k, v in attrs.items()})
    if text is not None:
        child.text = clean(text)
    return child


def _value(v: object) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".") if isinstance(v, float) else clean(str(v))


def _points(xys: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{_value(float(x))},{_value(float(y))}" for x, y in xys)


def _tooltip(parent: ET.Element, text: str) -> None:
    _el(parent, "title", text)


def _defs(svg: ET.Element) -> None:
    defs = _el(svg, "defs")
    arrow = _el(defs, "marker", id="arrow", viewBox="0 0 10 10", refX=9, refY=5, markerWidth=7, markerHeight=7,
                orient="auto-start-reverse")
    _el(arrow, "path", d="M 0 0 L 10 5 L 0 10 z", fill="#455a64")


def _mark_shape(parent: ET.Element, kind: str, x: float, y: float, stable: bool, useless: bool) -> ET.Element:
    """Basic and coordinated: a square; forced: a diamond; initial: a circle. Pending
    (not yet stable): hollow. Useless: crossed out in red."""
    fill = KIND_FILL.get(kind, KIND_FILL["basic"]) if stable else "#ffffff"
    stroke = KIND_FILL.get(kind, KIND_FILL["basic"])
    h = MARK / 2
    if kind == "forced":
        corners = ((x, y - h - 1), (x + h + 1, y), (x, y + h + 1), (x - h - 1, y))
        shape = _el(parent, "polygon", points=_points(corners), fill=fill, stroke=stroke, stroke_width=2)
    elif kind == "initial":
        shape = _el(parent, "circle", cx=x, cy=y, r=h - 1, fill=fill, stroke=stroke, stroke_width=2)
    else:
        shape = _el(parent, "rect", x=x - h, y=y - h, width=MARK, height=MARK, fill=fill, stroke=stroke,
                    stroke_width=2)
    if useless:
        _el(parent, "path", d=f"M {x - h - 2} {y - h - 2} L {x + h + 2} {y + h + 2} M {x - h - 2} {y + h + 2} "
                              f"L {x + h + 2} {y - h - 2}", stroke="#d32f2f", stroke_width=2.5,
            class_="useless-cross")
    return shape


def _lanes(svg: ET.Element, layout: _Layout) -> None:
    right = layout.width - MARGIN
    for lane in layout.picture.lanes:
        y = layout.lane_y[lane.agent]
        group = _el(svg, "g", class_="lane", data_agent=lane.agent)
        _tooltip(group, f"agent {lane.agent}" + (f" ({lane.note})" if lane.note else ""))
        _el(group, "line", x1=layout.x(0), y1=y, x2=right, y2=y, stroke="#90a4ae", stroke_width=2)
        _el(group, "line", x1=layout.x(0), y1=y - MARK, x2=layout.x(0), y2=y + MARK, stroke="#90a4ae",
            stroke_width=2)  # where the agent starts: its initial state, checkpoint 0
        _el(group, "text", _label(lane), x=MARGIN, y=y + 4, font_size=13, class_="lane-label")


def _marks(svg: ET.Element, layout: _Layout) -> None:
    for m in layout.picture.marks:
        if m.agent not in layout.lane_y:
            continue
        group = _el(svg, "g", class_=" ".join(("checkpoint", m.kind, "stable" if m.stable else "pending",
                                               *(("useless",) if m.useless else ()))),
                    data_agent=m.agent, data_index=m.index, data_x=layout.x(m.index), data_y=layout.lane_y[m.agent])
        _tooltip(group, f"{m.agent} checkpoint {m.index}: {m.kind}, {'stable' if m.stable else 'pending'}"
                        + (", useless (on a Z-cycle)" if m.useless else ""))
        _mark_shape(group, m.kind, layout.x(m.index), layout.lane_y[m.agent], m.stable, m.useless)


def _messages(svg: ET.Element, layout: _Layout) -> None:
    shown = [m for m in layout.picture.messages if m.sender in layout.lane_y and m.receiver in layout.lane_y]
    # Each (agent, interval)'s sends and receives, in the order given, spread across the interval.
    events: dict[tuple[str, int], list[tuple[int, bool]]] = defaultdict(list)
    for n, m in enumerate(shown):
        events[(m.sender, m.send_interval)].append((n, True))
        events[(m.receiver, m.receive_interval)].append((n, False))
    place = {event: (k + 1) / (len(slot) + 1) for slot in events.values() for k, event in enumerate(slot)}
    for n, m in enumerate(shown):
        x1 = layout.interval_x(m.send_interval, place[(n, True)])
        x2 = layout.interval_x(m.receive_interval, place[(n, False)])
        y1, y2 = layout.lane_y[m.sender], layout.lane_y[m.receiver]
        if m.sender == m.receiver:
            y2 = y1 - LANE / 3  # a message to itself: a short tick above the lane
        group = _el(svg, "g", class_="message", data_sender=m.sender, data_receiver=m.receiver)
        _tooltip(group, f"message {m.message_id}: {m.sender} interval {m.send_interval} -> "
                        f"{m.receiver} interval {m.receive_interval}")
        _el(group, "line", x1=x1, y1=y1, x2=x2, y2=y2, stroke="#455a64", stroke_width=1.2,
            marker_end="url(#arrow)")


def _cut(svg: ET.Element, layout: _Layout, cut: Cut, css: str, colour: str, offset: float, dash: str) -> None:
    """A polyline through the cut's checkpoints, top lane to bottom, named at its last point."""
    vertices = [(layout.x(cut.points[lane.agent]) + offset, layout.lane_y[lane.agent])
                for lane in layout.picture.lanes if lane.agent in cut.points]
    if not vertices:
        return
    held = " ".join(f"{a}:{i}" for a, i in sorted(cut.points.items()))
    group = _el(svg, "g", class_=css, data_name=cut.name, data_cut=held)
    _tooltip(group, f"{cut.name}: {held}")
    if len(vertices) == 1:  # a one-lane cut still shows as a short bar
        x, y = vertices[0]
        vertices = [(x, y - LANE / 3), (x, y + LANE / 3)]
    _el(group, "polyline", points=_points(vertices), fill="none", stroke=colour, stroke_width=2.5,
        stroke_dasharray=dash)
    x, y = vertices[-1]
    _el(group, "text", cut.name, x=x + 4, y=y + LANE / 2 - 6, font_size=11, fill=colour, class_="cut-label")


def _legend(svg: ET.Element, layout: _Layout) -> float:
    """The key to the marks and lines, below the lanes; returns where it ends on the right."""
    y = layout.lanes_bottom + LEGEND_HEIGHT / 2 + 4
    legend = _el(svg, "g", class_="legend")
    x = float(MARGIN)
    entries: list[tuple[str, str]] = [(kind, kind) for kind in ("basic", "forced", "coordinated")]
    entries += [("pending", "pending (not stable)"), ("useless", "useless (on a Z-cycle)")]
    for what, words in entries:
        kind = what if what in KINDS else "basic"
        _mark_shape(legend, kind, x + MARK / 2, y, what != "pending", what == "useless")
        _el(legend, "text", words, x=x + MARK + 6, y=y + 4, font_size=11)
        x += MARK + 14 + 6.5 * len(words)
    _el(legend, "line", x1=x, y1=y, x2=x + 28, y2=y, stroke="#455a64", stroke_width=1.2, marker_end="url(#arrow)")
    _el(legend, "text", "message", x=x + 34, y=y + 4, font_size=11)
    x += 34 + 6.5 * 8 + 14
    for colour, dash, words in (("#d32f2f", "none", "recovery line"), (CUT_COLOURS[0], "6 3", "savepoint")):
        _el(legend, "line", x1=x, y1=y, x2=x + 28, y2=y, stroke=colour, stroke_width=2.5, stroke_dasharray=dash)
        _el(legend, "text", words, x=x + 34, y=y + 4, font_size=11)
        x += 34 + 6.5 * len(words) + 14
    return x


def svg_element(picture: Picture) -> ET.Element:
    layout = _Layout(picture)
    svg = ET.Element("svg", xmlns=SVG_NS)
    _defs(svg)
    _el(svg, "text", picture.title, x=MARGIN, y=MARGIN + 12, font_size=15, font_weight="bold", class_="title")
    _lanes(svg, layout)
    _messages(svg, layout)
    _marks(svg, layout)
    if picture.recovery_line is not None:
        _cut(svg, layout, picture.recovery_line, "recovery-line", "#d32f2f", 0, "none")
    for n, savepoint in enumerate(picture.savepoints):
        _cut(svg, layout, savepoint, "savepoint", CUT_COLOURS[n % len(CUT_COLOURS)], 3 * (n + 1), "6 3")
    width = max(layout.width, _legend(svg, layout))
    height = layout.lanes_bottom + LEGEND_HEIGHT + MARGIN
    for name, value in (("width", f"{width:g}"), ("height", f"{height:g}"), ("viewBox", f"0 0 {width:g} {height:g}"),
                        ("font-family", "sans-serif")):
        svg.set(name, value)
    return svg


def svg(picture: Picture) -> str:
    """A standalone SVG document."""
    return ET.tostring(svg_element(picture), encoding="unicode", xml_declaration=True) + "\n"


def html_page(pictures: Sequence[Picture]) -> str:
    """A minimal page holding the pictures' SVGs inline, one after another (a browser opens it from a file)."""
    body = "\n".join(ET.tostring(svg_element(p), encoding="unicode") for p in pictures)
    title = html.escape(clean(", ".join(p.title for p in pictures)))
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n"
            f"</head>\n<body>\n{body}\n</body>\n</html>\n")
