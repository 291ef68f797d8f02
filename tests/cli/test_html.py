"""The graph page of `tessera show --html`: self-contained, one box per kernel, edges labelled
with shapes, coloured by a profile; rendered by a real headless browser where one is installed."""

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest


class _Elements(HTMLParser):
    """Every start tag with its attributes, and the text of <script> elements."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)

    def with_class(self, name):
        return [a for _, a in self.tags if name in a.get("class", "").split()]


def _parse(text):
    p = _Elements()
    p.feed(text)
    return p


def _page(cli, tmp_path, cnn_path, *extra):
    page = tmp_path / "graph.html"
    result = cli("show", cnn_path, "--html", page, *extra)
    assert result.returncode == 0, result.stderr
    return page.read_text()


def test_page_structure(cli, tmp_path, cnn_path):
    text = _page(cli, tmp_path, cnn_path)
    page = _parse(text)
    kernels = page.with_class("kernel")
    names = [k["data-name"] for k in kernels]
    assert names == [  # conv and pool in NCHW[x]c (alter_layout); the conv reads x (3 channels)
        "fused_nn_conv2d_nchwc_add_nn_relu",
        "fused_nn_max_pool2d_nchwc",
        "fused_layout_transform_reshape",
        "fused_nn_dense_packed_add",
        "fused_nn_softmax",
    ]
    assert len(page.with_class("io")) == 2  # input x, output y
    edges = page.with_class("edge")
    assert len(edges) == 6  # a chain: x -> 5 kernels -> y
    assert ("in:x", "k0") in {(e["data-from"], e["data-to"]) for e in edges}
    # (the conv's and pool's blocked shapes depend on this CPU's vector width)
    for shape in ("1x3x8x8", "1x128", "1x10"):
        assert f">{shape}</text>" in text
    # self-contained: no external scripts, styles, images or fonts
    assert not [a for _, a in page.tags if "src" in a or a.get("rel") == ["stylesheet"]]
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text)
    data = json.loads(next(s for s in page.scripts if s.lstrip().startswith("{")))
    assert data["nodes"]["k0"]["nodes"] == ["conv1", "relu1"]  # reads the NCHW input as it is
    assert data["nodes"]["k3"]["ops"] == ["nn.dense_packed", "add"]


def test_page_coloured_by_profile(cli, tmp_path, cnn_path, cnn_so):
    prof = tmp_path / "prof.json"
    assert cli("run", cnn_so, "--profile-json", prof, "--repeat", "2", "-q").returncode == 0
    text = _page(cli, tmp_path, cnn_path, "--profile", prof)
    fills = re.findall(r'<g class="kernel".*?fill="(rgb\(250,(\d+),(\d+)\))"', text, re.S)
    assert len(fills) == 5
    assert min(int(g) for _, g, _ in fills) == 60  # the slowest kernel is red
    assert " ms · " in text and "ms in kernels" in text
    profile = json.loads(prof.read_text())
    profile["kernels"].append({"index": 99, "name": "x", "nodes": [], "seconds": 1.0})
    prof.write_text(json.dumps(profile))
    result = cli("show", cnn_path, "--html", tmp_path / "g.html", "--profile", prof)
    assert result.returncode == 1 and "kernel calls" in result.stderr


# Headless, without a sandbox (CI runs as root), and with nothing that would reach the network
# or update itself: the page is a local file.
BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(_browser() is None, reason="no headless browser installed")
def test_page_renders_in_a_browser(cli, tmp_path, cnn_path):
    _page(cli, tmp_path, cnn_path)
    url = (tmp_path / "graph.html").as_uri()
    profile = tmp_path / "browser-profile"  # a new, empty profile: no state from elsewhere
    profile.mkdir()
    args = [_browser(), *BROWSER_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url]
    dom = subprocess.run(args, capture_output=True, text=True, timeout=120).stdout
    page = _parse(dom)
    assert len(page.with_class("kernel")) == 5
    assert any(t == "svg" for t, _ in page.tags)
    assert "fused_nn_softmax" in dom
