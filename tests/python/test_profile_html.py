"""The `kiln profile` HTML report (tools/profile_report.html), loaded in a real headless Chromium.

The template holds one line that is exactly the data placeholder; `kiln profile` replaces it with the
profile as a JSON object whose every '<' is written as \\u003c. `fill` below does the same, Chromium
renders the page (--dump-dom prints the DOM after the scripts ran) and html.parser reads it back.
The browser tests skip when no `chromium` (or `chromium-browser`) is on PATH (Debian: apt-get install
chromium); the template's static checks run everywhere.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "tools" / "profile_report.html"
PLACEHOLDER = "__KILN_PROFILE_DATA__"
KILN = REPO / "build" / "kiln"
EXAMPLE = REPO / "examples" / "tiny_cnn.onnx"

HOSTILE = "</script><img src=x onerror=alert(1)>"


# ---- filling the template, as the C++ side does ----

def fill(data) -> str:
    """The template with its placeholder line replaced: `data` as JSON ('<' written as \\u003c), or a
    str put in verbatim (to feed the page malformed data)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    lines = TEMPLATE.read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line == PLACEHOLDER]
    assert len(hits) == 1, hits
    lines[hits[0]] = payload
    return "\n".join(lines)


# ---- a small DOM read back from Chromium's --dump-dom output ----

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag, attrs, parent=None):
        self.tag, self.attrs, self.parent, self.children = tag, dict(attrs), parent, []

    def iter(self):
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(self, tag=None, id=None, cls=None, **attrs):
        out = []
        for n in self.iter():
            if tag is not None and n.tag != tag:
                continue
            if id is not None and n.attrs.get("id") != id:
                continue
            if cls is not None and cls not in (n.attrs.get("class") or "").split():
                continue
            if any(n.attrs.get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            out.append(n)
        return out

    def find(self, *args, **kwargs):
        found = self.find_all(*args, **kwargs)
        return found[0] if found else None

    def text(self):
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)


class DomBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.stack[-1])
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, attrs, self.stack[-1]))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse_dom(html: str) -> Node:
    b = DomBuilder()
    b.feed(html)
    b.close()
    return b.root


# ---- Chromium ----

def chromium_binary():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def chromium():
    exe = chromium_binary()
    if not exe:
        pytest.skip("chromium not installed (Debian: apt-get install chromium): the HTML report is not loaded in a browser")
    return exe


def load(exe, page: Path, tmp_path: Path, fragment: str = "") -> Node:
    """The DOM of `page` after its scripts ran, as headless Chromium dumps it."""
    profile_dir = tmp_path / f"chromium-profile-{page.stem}"
    # --no-sandbox: Chromium refuses to start as root with its sandbox on (and a container may lack the
    # user namespaces it needs otherwise); the pages loaded here are the test's own.
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           "--no-default-browser-check", "--disable-extensions", f"--user-data-dir={profile_dir}",
           "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri() + fragment]
    r = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", timeout=90)
    assert r.returncode == 0 and "<html" in r.stdout, f"chromium failed ({r.returncode}):\n{r.stderr[-3000:]}"
    return parse_dom(r.stdout)


def render(exe, data, tmp_path: Path, name="report", fragment="") -> Node:
    page = tmp_path / f"{name}.html"
    page.write_text(fill(data), encoding="utf-8")
    return load(exe, page, tmp_path, fragment)


def layer_names(dom: Node):
    table = dom.find("table", id="layers")
    assert table is not None, "no table#layers"
    tbody = table.find("tbody")
    assert tbody is not None, "table#layers has no tbody"
    return [tr.find("td", cls="name").text() for tr in tbody.find_all("tr")]


def assert_no_error(dom: Node):
    err = dom.find(id="error")
    assert err is None, "the report shows an error: " + err.text()


def field(dom: Node, name: str) -> str:
    dd = dom.find("dd", data_field=name)
    assert dd is not None, f"no header field {name}"
    return dd.text()


# ---- sample data ----

def layer(step, name, op, mean, device="cpu", **kw):
    d = {"step": step, "name": name, "op": op, "kernel": f"{device}.{op}.f32", "device": device,
         "precision": "float32", "tactic": "", "inputs": ["float32[1,3,32,32]", "float32[8,3,3,3]"],
         "outputs": ["float32[1,8,32,32]"], "output_bytes": 32768, "calls": 20, "total_ms": mean * 20,
         "mean_ms": mean}
    d.update(kw)
    return d


def sample():
    layers = [
        layer(0, "conv1", "Conv", 0.20),
        layer(1, HOSTILE, "Relu", 0.03),
        layer(2, "\"quoted\" & 'single' <b>bold</b> \\ back", "Conv", 0.35, device="cuda", tactic="winograd"),
        layer(3, "卷积/层 ✓ 😀 \u2028 sep", "Gemm", 0.10),
        layer(4, "<!-- not a comment --> ]]> {{x}}", "Relu", 0.02, inputs=[], outputs=[]),
        layer(5, "", "", 0.0, kernel="", device="", precision="", tactic=""),
    ]
    return {"kiln_version": "0.1.0", "model": "tiny_cnn.onnx <x>", "device": "cpu",
            "device_name": "x86_64 test cpu", "precision": "fp32", "runs": 20, "wall_ms_per_run": 0.82,
            "arena_bytes": {"cpu": 123456, "cuda": 5000000}, "layers": layers}


def op_order(layers):
    ms = {}
    for l in layers:
        ms[l["op"]] = ms.get(l["op"], 0.0) + l["mean_ms"]
    return [op for op, _ in sorted(ms.items(), key=lambda kv: (-kv[1], kv[0]))]


# ---- the template itself (no browser needed) ----

def test_template_is_self_contained_with_one_placeholder_line():
    text = TEMPLATE.read_text(encoding="utf-8")
    lines = text.split("\n")
    assert text.count(PLACEHOLDER) == 1 and lines.count(PLACEHOLDER) == 1
    i = lines.index(PLACEHOLDER)
    assert lines[i - 1].strip() == '<script type="application/json" id="kiln-profile">' and lines[i + 1].strip() == "</script>"
    # Nothing is fetched: no src/href attributes, no URLs but the SVG namespace (a name, not a resource).
    assert not re.search(r"\b(src|href)\s*=", text, re.I)
    assert re.findall(r"https?://[^\s'\"]+", text) == ["http://www.w3.org/2000/svg"]
    scripts = re.findall(r"<script>(.*?)</script>", text, re.S)
    assert len(scripts) == 1
    for bad in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert bad not in scripts[0], bad
    # The CSP allows exactly that inline script, by its hash.
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode("utf-8")).digest()).decode()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', text).group(1)
    assert f"'sha256-{digest}'" in csp, f"the CSP's script hash is stale: it should be 'sha256-{digest}'"


# ---- rendered in Chromium ----

def test_report_renders_hostile_names_as_text(chromium, tmp_path):
    data = sample()
    dom = render(chromium, data, tmp_path)
    assert_no_error(dom)
    # One row per layer, in execution order, every name as text.
    assert layer_names(dom) == [l["name"] for l in data["layers"]]
    # Nothing from the data became markup: the hostile names made no elements.
    assert dom.find_all("img") == [] and dom.find_all("b") == []
    body = dom.find("body")
    assert [n.tag for n in body.find_all("script")] == ["script", "script"]
    # One bar per op type, sorted by time; labels give op, ms and %.
    chart = dom.find("svg", id="op-chart")
    assert chart is not None
    assert len(chart.find_all("rect", cls="bar")) == len(op_order(data["layers"]))
    # (each label's first child is its text; a <title> with the full tooltip follows)
    labels = [t.children[0] for t in chart.find_all("text", cls="op-label")]
    assert labels == [op or "(none)" for op in op_order(data["layers"])]
    values = [t.text() for t in chart.find_all("text", cls="op-value")]
    assert values[0].startswith("0.550 ms") and "78.6%" in values[0], values
    # The header.
    assert field(dom, "runs") == "20"
    assert field(dom, "model") == "tiny_cnn.onnx <x>"
    assert field(dom, "device_name") == "x86_64 test cpu"
    assert field(dom, "wall_ms_per_run") == "0.820 ms"
    assert field(dom, "layer_ms_sum").startswith("0.700 ms")
    assert field(dom, "layer_count") == "6"
    assert dom.find("title").text() == "kiln profile \u2013 tiny_cnn.onnx <x>"
    # Placement: layers and time per device; memory: arena sizes, human-readable.
    placement = [[td.text() for td in tr.find_all("td")] for tr in dom.find("table", id="placement").find("tbody").find_all("tr")]
    assert placement == [["cpu", "4", "0.350", "50.0%"], ["cuda", "1", "0.350", "50.0%"], ["", "1", "0.000", "0.0%"]]
    memory = [[td.text() for td in tr.find_all("td")] for tr in dom.find("table", id="memory").find("tbody").find_all("tr")]
    assert memory == [["cpu", "121 KiB", "123456"], ["cuda", "4.77 MiB", "5000000"]]
    # A row's cells: step, name, op, kernel, device, precision, tactic, inputs, outputs, mean, %, bar.
    row = dom.find("table", id="layers").find("tbody").find_all("tr")[2]
    cells = [c for c in row.children if isinstance(c, Node)]
    assert [c.text() for c in cells[:11]] == ["2", data["layers"][2]["name"], "Conv", "cuda.Conv.f32", "cuda", "float32",
                                               "winograd", "float32[1,3,32,32]float32[8,3,3,3]", "float32[1,8,32,32]",
                                               "0.350", "50.0%"]
    assert [d.text() for d in cells[7].find_all("div")] == ["float32[1,3,32,32]", "float32[8,3,3,3]"]
    assert cells[11].find("span", cls="fill").attrs["style"] == "width: 100%;"


@pytest.mark.parametrize("fragment,key", [("#sort=-mean_ms", lambda l: (-l["mean_ms"], l["step"])),
                                          ("#sort=name", lambda l: (l["name"], l["step"])),
                                          ("#sort=-step", lambda l: -l["step"])])
def test_sort_order_from_the_address(chromium, tmp_path, fragment, key):
    data = sample()
    dom = render(chromium, data, tmp_path, fragment=fragment)
    assert_no_error(dom)
    assert layer_names(dom) == [l["name"] for l in sorted(data["layers"], key=key)]
    th = dom.find("th", data_key=fragment.split("=")[1].lstrip("-"))
    assert th.attrs.get("aria-sort") == ("descending" if "=-" in fragment else "ascending")


@pytest.mark.parametrize("data", [{**sample(), "layers": []}, {}], ids=["no-layers", "empty-object"])
def test_empty_profile(chromium, tmp_path, data):
    dom = render(chromium, data, tmp_path)
    assert_no_error(dom)
    assert layer_names(dom) == []
    assert dom.find_all("rect", cls="bar") == []
    assert field(dom, "layer_count") == "0"


@pytest.mark.parametrize("payload,why", [
    ('{"runs": 3, "layers": [', "not valid JSON"),                    # truncated
    ("not json at all </script> <p id=x>", "not valid JSON"),       # garbage (a closing tag too, verbatim)
    ("[1, 2, 3]", "not a JSON object"),
    ('{"layers": "conv1"}', '"layers" is not a list'),
    ('{"layers": [{"name": "a"}, 7]}', "layer 1 is not a JSON object"),
    (PLACEHOLDER, "not valid JSON"),                                 # the template never filled
], ids=["truncated", "garbage", "array", "layers-not-list", "layer-not-object", "unfilled"])
def test_malformed_data_shows_an_error(chromium, tmp_path, payload, why):
    dom = render(chromium, payload, tmp_path)
    err = dom.find(id="error")
    assert err is not None, "no #error element"
    # The script's own message (the page's static fallback says only that the script did not run).
    assert why in err.text(), err.text()
    assert "hidden" not in err.attrs
    assert dom.find("table", id="layers") is None


# ---- end to end: `kiln profile` ----

def kiln_has_profile():
    if not KILN.exists():
        return False
    r = subprocess.run([str(KILN), "--help"], capture_output=True, text=True, timeout=30)
    return re.search(r"^\s+profile\s", r.stdout + r.stderr, re.M) is not None


def test_kiln_profile_writes_trace_and_report(tmp_path):
    if not kiln_has_profile():
        pytest.skip("build/kiln has no `profile` subcommand yet (not listed by `kiln --help`)")
    prefix = tmp_path / "prof"
    r = subprocess.run([str(KILN), "profile", str(EXAMPLE), "--runs", "5", "-o", str(prefix)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    trace_path, html_path = tmp_path / "prof.json", tmp_path / "prof.html"
    assert trace_path.exists() and html_path.exists(), sorted(os.listdir(tmp_path))

    # The Chrome trace: {"traceEvents": [...]}, complete ("X") events with name, ts, dur and args.
    trace = json.loads(trace_path.read_text(encoding="utf-8"))
    assert isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list), type(trace)
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert spans
    for e in spans:
        assert isinstance(e.get("name"), str) and isinstance(e.get("ts"), (int, float)), e
        assert isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0 and isinstance(e.get("args"), dict), e
    nodes = [e for e in spans if e.get("cat") == "Node"]
    assert nodes and all("op_name" in e["args"] for e in nodes), nodes[:3]
    first_run = [e for e in nodes if e["args"].get("run") == 0]
    assert first_run

    # The report: the data line holds no '<' (the JSON writes it as \u003c), then the page renders.
    html = html_path.read_text(encoding="utf-8")
    data_block = re.search(r'<script type="application/json" id="kiln-profile">\n(.*?)\n</script>', html, re.S)
    assert data_block and "<" not in data_block.group(1)
    assert isinstance(json.loads(data_block.group(1)), dict)

    exe = chromium_binary()
    if not exe:
        pytest.skip("chromium not installed (Debian: apt-get install chromium): the report is not loaded in a browser")
    dom = load(exe, html_path, tmp_path)
    assert_no_error(dom)
    assert len(layer_names(dom)) == len(first_run)
    assert field(dom, "runs") == "5"
