"""The static results site (``python -m repro dashboard``): built from a small fixture, offline,
with links that resolve inside the site and CPU smoke rows kept out of the GPU sections."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from repro.cli import main as cli_main
from repro.dashboard import build_site

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dashboard"
GPU = "nvidia-h100-80gb-hbm3"
PAGES = [
    "index.html",
    "table2.html",
    "kernels.html",
    "hu2024_text_claims.html",
    "fast_text_claims.html",
    "madhyastha2026_text_claims.html",
]
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []  # (tag, attr, value)

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("href", "src") and v is not None:
                self.refs.append((tag, k, v))


def _refs(page: Path) -> list[tuple[str, str, str]]:
    p = _Refs()
    p.feed(page.read_text(encoding="utf-8"))
    return p.refs


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dash") / "site"
    index = build_site(FIXTURE / "results", FIXTURE / "figures", out)
    assert index == out / "index.html"
    return out


def _section(text: str, device: str, profile: str) -> str:
    m = re.search(rf'<section class="run" id="run-{device}-{profile}".*?</section>', text, re.S)
    assert m, f"no section for {device}/{profile}"
    return m.group(0)


def test_pages_exist(site: Path) -> None:
    for name in ("index.html", "table2.html", "kernels.html", f"figures/{GPU}/table2.png"):
        assert (site / name).is_file(), name
    assert not (site / "table3.html").exists()  # no results, no page
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "<table" in index and "snakemake table2" in index
    row = re.search(r"<tr><td>hu2024</td><td>table2</td>.*?</tr>", index).group(0)
    assert "NVIDIA H100 80GB HBM3 (full)" in row and "CPU (smoke)" in row
    # the suite's verdict on the GPU run, with its caveat (paper value, tolerance, what differs)
    status = re.search(r'class="badge [^"]*" title="[^"]*">([^<]*)<', row).group(1)
    assert status in ("reproduced", "exceeds", "falls short", "not comparable", "stale")
    assert status != "stale" or "its verdict would read" in row  # the fixture's rows may predate the code
    assert ("tolerance" in row or "more than twice the paper" in row) and "RTX 3090" in row
    assert re.search(r"ratio: paper [0-9.]+x vs ours [0-9.]+x", row)
    row3 = re.search(r"<tr><td>hu2024</td><td>table3</td>.*?</tr>", index).group(0)
    assert "no GPU run" in row3  # suite exists, no rows in the fixture
    row1 = re.search(r"<tr><td>hu2024</td><td>table1</td>.*?</tr>", index).group(0)
    assert "no GPU run" in row1  # hu_table1 exists (artifact table1 of hu2024), no rows in the fixture
    row_t4 = re.search(r"<tr><td>hu2024</td><td>table4</td>.*?</tr>", index).group(0)
    assert "no GPU run" in row_t4 and "snakemake hu_table4" in row_t4  # the GLUE suite, no rows in the fixture
    row_t6 = re.search(r"<tr><td>hu2024</td><td>table6</td>.*?</tr>", index).group(0)
    assert "not yet" in row_t6 and "WMT14" in row_t6  # no suite for Transformer-base / DeiT; the index says why
    for name, artifact in (("hu_table5_glue", "table5_glue"), ("hu_table7_glue", "table7_glue")):
        row = re.search(rf"<tr><td>hu2024</td><td>{artifact}</td>.*?</tr>", index).group(0)
        assert f"snakemake {name}" in row  # its own row: the loss suites keep table5 / table7
    for name, artifact in (("table5", "table5"), ("table7", "table7")):
        row = re.search(rf"<tr><td>hu2024</td><td>{artifact}</td>.*?</tr>", index).group(0)
        assert f"snakemake {name}</code>" in row
    # claims made in prose: followed to the artifact, setting or test that checks each one
    row_tc = re.search(r"<tr><td>hu2024</td><td>text_claims</td>.*?</tr>", index).group(0)
    assert "cross-referenced" in row_tc and 'href="hu2024_text_claims.html"' in row_tc
    claims = (site / "hu2024_text_claims.html").read_text(encoding="utf-8")
    assert '<a href="table2.html">hu2024 table2</a> (no GPU run)' not in claims  # fixture: table2 has GPU rows
    assert re.search(
        r'<a href="table2.html">hu2024 table2</a> \((reproduced|exceeds|falls short|not comparable|stale)\)', claims
    )
    assert "hu2024 table8 (no GPU run)" in claims  # no page for it in the fixture: named, not linked
    row_m = re.search(r"<tr><td>madhyastha2026</td><td>text_claims</td>.*?</tr>", index).group(0)
    assert "not yet" in row_m and "not built" in row_m
    row4 = re.search(r"<tr><td>hu2024</td><td>figure4</td>.*?</tr>", index).group(0)
    assert "nothing to reproduce" in row4  # a diagram
    assert re.search(r"<strong>\d+ of \d+ artifacts with numbers reproduced</strong>", index)


def test_inline_literals_render_as_code(tmp_path: Path, monkeypatch) -> None:
    """Suite descriptions and check lists are docstring prose: their ``literals`` become <code>,
    no page shows backticks."""
    import suites.table2
    from repro.dashboard import _prose

    assert _prose("a ``x<y`` and `z`") == "a <code>x&lt;y</code> and <code>z</code>"
    monkeypatch.setattr(suites.table2, "__doc__", "Masks by ``transposable_mask(w)``, checked.\n\nMore.")
    monkeypatch.setattr(suites.table2, "CHECKS", ("``nm_mask`` equals the reference",))
    out = tmp_path / "site"
    build_site(FIXTURE / "results", FIXTURE / "figures", out)
    for page in out.glob("*.html"):
        assert "``" not in page.read_text(encoding="utf-8"), page.name
    text = (out / "table2.html").read_text(encoding="utf-8")
    assert "<code>transposable_mask(w)</code>" in text and "<li><code>nm_mask</code> equals" in text


def test_links_resolve_and_offline(site: Path) -> None:
    pages = sorted(site.glob("*.html"))
    assert len(pages) == 6  # index, table2, kernels and one claims page a paper
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), page.name
        assert "@import" not in text and "url(" not in text
        for tag, _attr, ref in _refs(page):
            if ref.startswith("#"):
                anchor = ref[1:]
                assert f'id="{anchor}"' in text, (page.name, ref)
                continue
            assert not re.match(r"^[a-z]+:", ref), (page.name, ref)  # relative only
            target = (site / ref.split("#")[0]).resolve()
            assert target.is_file(), (page.name, tag, ref)
            assert site.resolve() in target.parents


def test_cpu_smoke_rows_not_in_gpu_section(site: Path) -> None:
    text = (site / "table2.html").read_text(encoding="utf-8")
    gpu = _section(text, GPU, "full")
    cpu = _section(text, "cpu", "smoke")
    assert "32x16" not in gpu and "<td>cpu</td>" not in gpu and "smoke" not in gpu
    assert "1024x1600" in gpu and f"figures/{GPU}/table2.png" in gpu
    cpu_rows = cpu[cpu.index("<h3>All rows") :]  # the paper vs ours table lists the paper's shapes too
    assert "1024x1600" not in cpu_rows and "32x16" in cpu_rows and f"<td>{GPU}</td>" not in cpu_rows
    assert "not performance claims" in cpu
    assert "rows verified" in gpu and "NVIDIA H100 80GB HBM3" in gpu
    assert text.index(gpu) < text.index(cpu)  # GPU results first
    kernels = (site / "kernels.html").read_text(encoding="utf-8")
    assert "pct_of_copy" in kernels and "0001_fixture.json" in kernels


def test_cli_dashboard(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s"
    rc = cli_main(
        [
            "dashboard",
            "--results-dir",
            str(FIXTURE / "results"),
            "--figures-dir",
            str(FIXTURE / "figures"),
            "--out",
            str(out),
        ]
    )
    assert rc == 0 and (out / "index.html").is_file()
    assert "wrote" in capsys.readouterr().out


def _chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    profile = tmp / "profile"
    profile.mkdir(exist_ok=True)
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1280,900",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install -y chromium)")
@pytest.mark.parametrize("page", PAGES)  # every page of the fixture site
def test_browser_renders(site: Path, tmp_path: Path, page: str) -> None:
    assert sorted(p.name for p in site.glob("*.html")) == sorted(PAGES)
    url = (site / page).resolve().as_uri()
    shot = tmp_path / f"{Path(page).stem}.png"
    r = _chromium([f"--screenshot={shot}", url], tmp_path)
    assert shot.is_file() and shot.stat().st_size > 1000, r.stderr[-2000:]
    assert "Uncaught" not in r.stderr, r.stderr[-2000:]
    dump = _chromium(["--dump-dom", url], tmp_path)
    assert dump.returncode == 0, dump.stderr[-2000:]
    assert "Uncaught" not in dump.stderr, dump.stderr[-2000:]
    assert '<table class="sortable"' in dump.stdout and "</table>" in dump.stdout
    named = {"fast_text_claims.html": "figure3_e2e", "madhyastha2026_text_claims.html": "table8"}.get(page, "table2")
    assert named in dump.stdout
    if page == "table2.html":  # the suite page shows its figure
        assert "<img" in dump.stdout and "table2.png" in dump.stdout
    if os.environ.get("DASHBOARD_ARTIFACTS"):
        dest = Path(os.environ["DASHBOARD_ARTIFACTS"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, dest / shot.name)


# --- issue 21: --out safety and device names that would escape the site --------------------------


def _build(out: Path) -> Path:
    return build_site(FIXTURE / "results", FIXTURE / "figures", out)


def test_out_with_foreign_index_is_not_deleted(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "index.html").write_text("my notes index", encoding="utf-8")
    (out / "notes.txt").write_text("precious", encoding="utf-8")
    with pytest.raises(ValueError, match=r"mine.*\.repro-dashboard"):
        _build(out)
    assert (out / "notes.txt").read_text(encoding="utf-8") == "precious"
    assert (out / "index.html").read_text(encoding="utf-8") == "my notes index"


def test_out_rebuilt_only_with_marker(tmp_path: Path) -> None:
    out = tmp_path / "site"
    _build(out)
    assert (out / ".repro-dashboard").is_file()
    (out / "stale.html").write_text("old page", encoding="utf-8")
    (out / "figures" / "gone").mkdir(parents=True)
    _build(out)  # ours: replaced, stale files gone
    assert (out / "index.html").is_file() and not (out / "stale.html").exists()
    assert not (out / "figures" / "gone").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _build(empty) == empty / "index.html"
    assert _build(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper" / "index.html"


def test_out_is_a_file(tmp_path: Path, capsys) -> None:
    f = tmp_path / "report.html"
    f.write_text("keep me", encoding="utf-8")
    with pytest.raises(ValueError, match="not a folder"):
        _build(f)
    rc = cli_main(["dashboard", "--results-dir", str(FIXTURE / "results"), "--out", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "not a folder" in err and str(f) in err and len(err.strip().splitlines()) == 1
    assert f.read_text(encoding="utf-8") == "keep me"


def test_cli_dashboard_refuses_foreign_folder(tmp_path: Path, capsys) -> None:
    out = tmp_path / "notes"
    out.mkdir()
    (out / "index.html").write_text("x", encoding="utf-8")
    rc = cli_main(["dashboard", "--results-dir", str(FIXTURE / "results"), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and str(out) in err and len(err.strip().splitlines()) == 1
    assert (out / "index.html").read_text(encoding="utf-8") == "x"


def _escaping_fixture(tmp_path: Path, device: str) -> tuple[Path, Path]:
    results = tmp_path / "results"
    shutil.copytree(FIXTURE / "results", results)
    csv = results / "cpu" / "table2.csv"
    csv.write_text(csv.read_text(encoding="utf-8").replace(",cpu,none,", f",{device},none,"), encoding="utf-8")
    figures = tmp_path / "a" / "b" / "figures"
    shutil.copytree(FIXTURE / "figures", figures)
    (figures / device).mkdir(parents=True, exist_ok=True)  # a figure where the escaping path points
    shutil.copyfile(FIXTURE / "figures" / GPU / "table2.png", figures / device / "table2.png")
    return results, figures


@pytest.mark.parametrize("device", ["../../payload", "x/../../../payload"])
def test_device_cannot_escape_site(tmp_path: Path, device: str) -> None:
    results, figures = _escaping_fixture(tmp_path, device)
    out = tmp_path / "a" / "b" / "site"
    before = set(tmp_path.rglob("*"))
    with pytest.raises(ValueError, match=r"table2\.csv.*line 2.*device"):
        build_site(results, figures, out)
    outside = [p for p in set(tmp_path.rglob("*")) - before if p != out and out not in p.parents]
    assert not outside, outside


def test_copy_figures_refuses_bad_device(tmp_path: Path) -> None:
    from repro.dashboard import _copy_figures

    for bad in ("../../payload", "/abs/payload", ".."):
        with pytest.raises(ValueError, match="device"):
            _copy_figures(FIXTURE / "figures", tmp_path / "site", bad, "table2")
    assert not any(tmp_path.iterdir())


def test_kernels_page_draws_the_rooflines(site: Path) -> None:
    """Each run's kernels are drawn against the copy roofline, not only tabulated."""
    page = (site / "kernels.html").read_text(encoding="utf-8")
    imgs = re.findall(r'<img src="(figures/kernels_[^"]+\.png)"', page)
    assert imgs, "no roofline figure on the kernels page"
    for src in imgs:
        assert (site / src).stat().st_size > 1000


def test_the_overview_marks_stale_verdicts_and_does_not_count_them(tmp_path: Path, monkeypatch) -> None:
    """The overview showed a stale result's verdict as if it stood (staleness only on suite pages)."""
    import repro.dashboard as dash
    from repro.staleness import Staleness

    monkeypatch.setattr(dash, "frame_staleness", lambda suite, df: [Staleness("abc1234def", "fff0000", True)])
    index = build_site(FIXTURE / "results", FIXTURE / "figures", tmp_path / "site").read_text(encoding="utf-8")
    row = re.search(r"<tr><td>hu2024</td><td>table2</td>.*?</tr>", index).group(0)
    assert ">stale<" in row and "STALE: results from abc1234def" in row and "its verdict would read" in row
    assert re.search(r"<strong>0 of \d+ artifacts with numbers reproduced</strong>", index)


def test_a_site_folder_that_cannot_be_made_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("x")
    assert cli_main(["dashboard", "--out", str(tmp_path / "file" / "site")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot make the site folder" in err
