"""Static results site: ``python -m repro dashboard [--results-dir DIR] [--figures-dir DIR] [--out site]``.

Builds plain HTML pages from ``results/`` and ``figures/`` that work offline (no CDN, no external
scripts or fonts; one small inline click-to-sort script), publishable as is:

- ``index.html``: every table and figure of every paper, its status, a short paper vs ours summary,
  the GPU(s) it ran on and the command that rebuilds it;
- ``<suite>.html``: per device and profile (CPU smoke rows kept apart from GPU rows and labelled),
  the figure, the paper vs ours table, all rows, provenance and the correctness checks;
- ``kernels.html``: each timed kernel's bandwidth as a share of the measured copy bandwidth, per
  GPU, and the saved pytest-benchmark runs under ``results/benchmarks/``.
"""

from __future__ import annotations

import contextlib
import html
import inspect
import io
import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from repro.dashboard_claims import claims_page
from repro.paper import paper_index
from repro.results import PROVENANCE_COLUMNS, InputError, check_device_slug, contained_path, load_suite_results
from repro.staleness import frame_staleness

KERNEL_METRICS = ("pct_of_copy", "mask_pct_of_copy", "mask_graph_pct_of_copy")
# Written into every site this command builds; only a folder carrying it is ever emptied.
MARKER = ".repro-dashboard"

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;max-width:1200px;
padding:0 1em;color:#222}
h1,h2,h3{font-weight:600}nav a{margin-right:1em}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0;cursor:pointer;user-select:none}th.asc:after{content:" \\25B2"}
th.desc:after{content:" \\25BC"}td.num{text-align:right;font-variant-numeric:tabular-nums}
.scroll{max-height:480px;overflow:auto;border:1px solid #ddd;margin-bottom:1.5em}
.wide{overflow-x:auto}.scroll table{margin:0}
.badge{display:inline-block;padding:1px 6px;border-radius:3px;font-size:12px}
.reproduced{background:#c8f0c8}.exceeds{background:#c8e0f8}.fallsshort{background:#fbd0c0}.notcomparable{background:#fbe7a8}.noGPUrun{background:#eee}.notyet{background:#eee}.cross-referenced{background:#dde8f0}.nothingtoreproduce{background:#f6f6f6}.stale{background:#e0d0f0}.caveat{font-size:11px;color:#555;max-width:28em}
.smoke{background:#fbe7a8;padding:.5em;border-left:4px solid #d9a400}
section.run{border-top:2px solid #888;margin-top:2em}img{max-width:100%;border:1px solid #ddd}
figure{overflow-x:auto;margin:1em 0}figure img{max-width:none}
code{background:#f4f4f4;padding:0 3px}
"""

# Click a header to sort by that column (numbers numerically, empty cells last); click again to flip.
_JS = """
(function(){
function key(td){var t=td?td.textContent.trim():"";var n=parseFloat(t.replace(/,/g,""));
return {t:t,n:(t!==""&&isFinite(n)&&/^[-+]?[0-9.]/.test(t))?n:null};}
function cmp(a,b){if(a.t===""&&b.t==="")return 0;if(a.t==="")return 1;if(b.t==="")return -1;
if(a.n!==null&&b.n!==null)return a.n-b.n;if(a.n!==null)return -1;if(b.n!==null)return 1;
return a.t.localeCompare(b.t);}
document.querySelectorAll("table.sortable").forEach(function(tbl){
var ths=tbl.tHead?tbl.tHead.rows[0].cells:[];
Array.prototype.forEach.call(ths,function(th,i){th.addEventListener("click",function(){
var asc=!th.classList.contains("asc");
Array.prototype.forEach.call(ths,function(h){h.classList.remove("asc","desc");});
th.classList.add(asc?"asc":"desc");var body=tbl.tBodies[0];
var rows=Array.prototype.slice.call(body.rows);
rows.sort(function(r1,r2){var c=cmp(key(r1.cells[i]),key(r2.cells[i]));return asc?c:-c;});
rows.forEach(function(r){body.appendChild(r);});});});});
})();
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _prose(x: object) -> str:
    """Docstring prose as HTML: escaped, reST inline literals (double backticks) and Markdown
    ones (single) as <code>, not shown as backticks."""
    text = _e(x)
    text = re.sub(r"``(.+?)``", r"<code>\1</code>", text)
    return re.sub(r"(?<![`\w])`([^`]+?)`(?![`\w])", r"<code>\1</code>", text)


def _fmt(v: object) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        if pd.isna(v):
            return ""
        return f"{v:.4g}"
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return ""
    return str(v)


def _table(df: pd.DataFrame, scroll: bool = False) -> str:
    if df is None or df.empty:
        return "<p><em>no rows</em></p>"
    head = "".join(f"<th>{_e(c)}</th>" for c in df.columns)
    num = [pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]) for c in df.columns]
    body = []
    for row in df.itertuples(index=False):
        cells = "".join(
            f'<td class="num">{_e(_fmt(v))}</td>' if isnum else f"<td>{_e(_fmt(v))}</td>"
            for v, isnum in zip(row, num, strict=True)
        )
        body.append(f"<tr>{cells}</tr>")
    t = f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    return f'<div class="{"scroll" if scroll else "wide"}">{t}</div>'


def _page(title: str, body: str) -> str:
    nav = '<nav><a href="index.html">Overview</a><a href="kernels.html">Kernels</a></nav>'
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>{nav}<h1>{_e(title)}</h1>{body}"
        f"<script>{_JS}</script></body></html>\n"
    )


def _is_gpu(device: str) -> bool:
    return device != "cpu"


def _run_order(key: tuple[str, str]) -> tuple:
    device, profile = key
    return (not _is_gpu(device), profile != "full", device)


def _first_paragraph(doc: str | None) -> str:
    doc = inspect.cleandoc(doc or "")
    return " ".join(doc.split("\n\n")[0].split())


def _safe_compare(mod, df: pd.DataFrame) -> pd.DataFrame | None:
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # some compare()s print a note
            out = mod.compare(df)
    except Exception:  # a suite's compare() may not handle partial data; the page says so
        return None
    return out if isinstance(out, pd.DataFrame) else None


def _ratio_summary(table: pd.DataFrame | None) -> str:
    """Paper vs ours from a compare() table with ``paper_ratio`` and ``our_ratio`` columns (means
    over the rows that have both), else 'see page'. Suites may define ``summary(df)`` instead."""
    if table is None or table.empty or not {"paper_ratio", "our_ratio"} <= set(table.columns):
        return "see page"
    both = table[["paper_ratio", "our_ratio"]].dropna()
    if both.empty:
        return "see page"
    return f"ratio: paper {both['paper_ratio'].mean():.3g}x vs ours {both['our_ratio'].mean():.3g}x (mean)"


def _preferred_run(df: pd.DataFrame) -> pd.DataFrame:
    """GPU full-profile rows if any, else all smoke rows (the summary says which)."""
    gpu_full = df[(df["device"] != "cpu") & (df["profile"] == "full")]
    if not gpu_full.empty:
        first = sorted(gpu_full["device"].unique())[0]
        return gpu_full[gpu_full["device"] == first]
    if df.empty:
        return df
    key = sorted(df.groupby(["device", "profile"]).groups, key=_run_order)[0]
    return df[(df["device"] == key[0]) & (df["profile"] == key[1])]


def _status(df: pd.DataFrame | None, mod=None, note: str = "") -> tuple[str, str]:  # noqa: ANN001
    """(status, caveat) of one artifact: the suite's verdict on its preferred GPU run (reproduced,
    exceeds, falls short, not comparable); "no GPU run" where only smoke/CPU rows exist; "nothing
    to reproduce" for diagrams; "not yet" where no suite exists."""
    if df is None:
        if "diagram" in note or "no numeric values" in note:
            return "nothing to reproduce", "a diagram or layout, no numbers"
        return "not yet", ""
    gpu = df[(df["device"] != "cpu") & (df["profile"] == "full")]
    if gpu.empty:
        return "no GPU run", "only smoke/CPU rows: not a performance claim"
    if mod is not None and hasattr(mod, "verdict"):
        run = _preferred_run(df)
        try:
            v = mod.verdict(run)
        except Exception as e:  # noqa: BLE001 (a broken verdict must not break the site)
            return "not comparable", f"verdict failed: {type(e).__name__}"
        name = getattr(mod, "NAME", None)
        stale = [st for st in frame_staleness(name, run) if st.stale] if name else []
        if stale:  # results older than the code behind them: the verdict is not counted as standing
            return "stale", f"{stale[0].sentence()}; its verdict would read {v.status!r}: {v.caveat}"
        return v.status, v.caveat
    return "not comparable", "the suite gives no verdict"


def _gpus(df: pd.DataFrame | None) -> str:
    if df is None or df.empty:
        return ""
    runs = []
    for (dev, prof), part in sorted(df.groupby(["device", "profile"]), key=lambda kv: _run_order(kv[0])):
        name = part["gpu_name"].iloc[0] if _is_gpu(dev) else "CPU"
        runs.append(f"{name} ({prof})")
    return ", ".join(runs)


def _copy_figures(figures_dir: Path, out: Path, device: str, suite: str) -> list[str]:
    """Copy figures/<device>/<suite>.{png,svg} into the site; return the PNG's (or SVG's) site path."""
    check_device_slug(device, f"figures of {suite}")
    shown = []
    for ext in ("png", "svg"):
        src = contained_path(figures_dir, device, f"{suite}.{ext}", what="figure")
        if src.is_file():
            dst = contained_path(out / "figures", device, src.name, what="site figure")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            shown.append(f"figures/{device}/{src.name}")
    return shown


def _suite_page(name: str, mod, df: pd.DataFrame, figures_dir: Path, out: Path) -> None:
    body = [
        f"<p>{_e(mod.PAPER)} {_e(mod.ARTIFACT)}. Rebuild: <code>snakemake {_e(name)}</code> "
        f"(or <code>python -m repro run {_e(name)}</code>).</p>",
        f"<p>{_prose(_first_paragraph(mod.__doc__))}</p>",
        *([f"<p class='smoke'><b>Reduced scale.</b> {_prose(mod.SCALE)}</p>"] if getattr(mod, "SCALE", "") else []),
        "<h2>Correctness checks that gate the numbers</h2>",
        "<ul>" + "".join(f"<li>{_prose(c)}</li>" for c in getattr(mod, "CHECKS", ())) + "</ul>",
        "<p>A failed check stops the run and writes nothing. A row says <code>verified=True</code> only "
        "where a check of its own output ran in the same run and passed (for a time: the output of the "
        "timed call itself); rows that no check stands behind say <code>verified=False</code>.</p>",
    ]
    groups = sorted(df.groupby(["device", "profile"]), key=lambda kv: _run_order(kv[0]))
    toc = "".join(f'<li><a href="#run-{_e(d)}-{_e(p)}">{_e(d)} / {_e(p)} profile</a></li>' for (d, p), _ in groups)
    body.append(f"<h2>Runs</h2><ul>{toc}</ul>")
    for (dev, prof), part in groups:
        gpu = _is_gpu(dev)
        kind = f"GPU: {part['gpu_name'].iloc[0]}" if gpu else "CPU"
        body.append(
            f'<section class="run" id="run-{_e(dev)}-{_e(prof)}" data-device="{_e(dev)}" data-profile="{_e(prof)}">'
        )
        body.append(f"<h2>{_e(dev)} &mdash; {_e(prof)} profile ({_e(kind)})</h2>")
        for st in frame_staleness(name, part):  # results older than the code behind them say so
            cls = "stale" if st.stale else ("reviewed" if st.reviewed_at else "fresh")
            body.append(f'<p class="{cls}"><strong>{_e(st.sentence())}</strong></p>')
        if prof != "full" or not gpu:
            body.append(
                f'<p class="smoke">{_e(prof)} profile on {"a GPU" if gpu else "a CPU"}: tiny shapes and/or '
                "interpreted kernels with a host timer; these rows check the pipeline and are "
                "<strong>not performance claims</strong>.</p>"
            )
        # figures/<device>/<suite> is drawn from full rows where the device has them (repro plot)
        has_full = (df[(df["device"] == dev)]["profile"] == "full").any()
        if prof == "full" or not has_full:
            figs = _copy_figures(figures_dir, out, dev, name)
            png = [f for f in figs if f.endswith(".png")] or figs[:1]
            for f in png:
                links = " ".join(f'<a href="{_e(g)}">{_e(Path(g).suffix[1:].upper())}</a>' for g in figs)
                body.append(
                    f'<figure><img src="{_e(f)}" alt="{_e(name)} on {_e(dev)}">'
                    f"<figcaption>{links}</figcaption></figure>"
                )
            if not figs:
                body.append(f"<p><em>no figure in figures/{_e(dev)}/</em></p>")
        ver = int(part["verified"].sum())
        body.append(f"<h3>Correctness</h3><p>{ver} of {len(part)} rows verified.</p>")
        table = _safe_compare(mod, part)
        body.append("<h3>Paper vs ours</h3>")
        body.append(_table(table) if table is not None else "<p><em>compare() failed on these rows</em></p>")
        body.append("<h3>Provenance</h3>")
        prov = pd.DataFrame(
            {"field": c, "values": ", ".join(sorted({_fmt(v) for v in part[c]}))} for c in PROVENANCE_COLUMNS
        )
        body.append(_table(prov))
        body.append(f"<h3>All rows ({len(part)})</h3>")
        cols = [c for c in part.columns if c not in PROVENANCE_COLUMNS or c == "device"]
        body.append(_table(part[cols].reset_index(drop=True), scroll=True))
        body.append("</section>")
    (out / f"{name}.html").write_text(_page(f"{name}: {mod.TITLE}", "\n".join(body)), encoding="utf-8")


def _benchmark_runs(results_dir: Path) -> pd.DataFrame:
    rows = []
    for p in sorted((results_dir / "benchmarks").glob("**/*.json")):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        mi = data.get("machine_info") or {}
        rows.append(
            {
                "name": str(p.relative_to(results_dir)),
                "date": data.get("datetime", ""),
                "gpu": mi.get("gpu", "") if isinstance(mi, dict) else "",
                "benchmarks": len(data.get("benchmarks") or []),
            }
        )
    return pd.DataFrame(rows, columns=["name", "date", "gpu", "benchmarks"])


def _kernels_page(frames: dict[str, pd.DataFrame], results_dir: Path, out: Path) -> None:
    all_rows = [df for df in frames.values() if not df.empty]
    df = pd.concat(all_rows, ignore_index=True) if all_rows else pd.DataFrame()
    body = [
        "<p>Achieved bandwidth of every timed kernel as a percentage of the device-to-device copy "
        "bandwidth measured on the same device in the same run (the roofline of a memory-bound kernel).</p>"
    ]
    if not df.empty:
        k = df[df["metric"].isin(KERNEL_METRICS)]
        for (dev, prof), part in sorted(k.groupby(["device", "profile"]), key=lambda kv: _run_order(kv[0])):
            label = part["gpu_name"].iloc[0] if _is_gpu(dev) else "CPU"
            body.append(f'<section class="run" data-device="{_e(dev)}" data-profile="{_e(prof)}">')
            body.append(f"<h2>{_e(label)} ({_e(dev)}, {_e(prof)} profile)</h2>")
            if prof != "full" or not _is_gpu(dev):
                body.append('<p class="smoke">smoke profile: not a performance claim.</p>')
            fig = _roofline_figure(part, out / "figures" / f"kernels_{dev}_{prof}")
            if fig is not None:
                body.append(
                    f'<figure><img src="figures/{_e(fig.name)}" alt="% of copy bandwidth per kernel and shape, '
                    f"{_e(dev)}\"><figcaption>each kernel's % of the measured copy bandwidth, per shape "
                    "(100% = the roofline of a memory-bound kernel)</figcaption></figure>"
                )
            cols = ["suite", "method", "variant", "shape", "dtype", "metric", "value", "unit", "verified"]
            body.append(_table(part[cols].reset_index(drop=True), scroll=True))
            body.append("</section>")
    else:
        body.append("<p><em>no results</em></p>")
    bench = _benchmark_runs(results_dir)
    body.append("<h2>Saved pytest-benchmark runs</h2>")
    body.append(_table(bench) if not bench.empty else "<p><em>none saved under results/benchmarks/</em></p>")
    (out / "kernels.html").write_text(_page("Kernels: bandwidth vs roofline", "\n".join(body)), encoding="utf-8")


def _roofline_figure(part: pd.DataFrame, stem: Path) -> Path | None:
    """One panel per suite: % of copy bandwidth (``pct_of_copy``) per shape (and variant, e.g. a
    pattern), a bar per method, with the 100% roofline; the PNG path, or None without such rows."""
    from repro.plots import grouped_bars, new_figure, save

    rows = part[part["metric"] == "pct_of_copy"].copy()
    if rows.empty:
        return None
    rows["series"] = rows["method"]
    variant = rows["variant"].fillna("").map(lambda v: f" {v}" if v else "")
    rows["group"] = rows["shape"] + variant + " " + rows["dtype"]
    suites = sorted(rows["suite"].unique())
    fig, axes = new_figure(ncols=1, width=max(8.0, 0.35 * rows["group"].nunique() * 2), height=3.6, nrows=len(suites))
    for ax, suite in zip(axes, suites, strict=True):
        sub = rows[rows["suite"] == suite]
        groups = list(dict.fromkeys(sub["group"]))
        table = sub.pivot_table(index="group", columns="series", values="value", aggfunc="first").reindex(groups)
        series = {c: list(table[c]) for c in table.columns}
        grouped_bars(ax, groups, series, ylabel="% of copy bandwidth", title=suite)
        ax.axhline(100.0, color="black", lw=0.8, ls="--")
        ax.legend(fontsize=6, loc="upper left", ncol=4)
    return save(fig, stem)[0]


def _check_out(out: Path) -> None:
    """``out`` may be missing, an empty folder or a site this command built (it has ``MARKER``);
    anything else (a file, a folder of someone's notes, even with an index.html) is refused."""
    if out.is_symlink() and not out.exists():
        raise InputError(f"--out {out} is a broken symbolic link; refusing to write through it")
    if not out.exists():
        return
    if not out.is_dir():
        raise InputError(f"--out {out} exists and is not a folder; give a folder for the site")
    if any(out.iterdir()) and not (out / MARKER).is_file():
        raise InputError(
            f"--out {out} is a non-empty folder without the {MARKER} marker of a site built by "
            "`python -m repro dashboard`; refusing to replace its contents (remove it yourself or pick another folder)"
        )


def _clear_out(out: Path) -> None:
    """Empty ``out`` (checked by ``_check_out``) or create it, and mark it as ours."""
    _check_out(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # README.md/site, /proc/x: one line, not a traceback
        raise InputError(f"cannot make the site folder {out}: {exc.strerror or exc}") from None
    for child in out.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    (out / MARKER).write_text("built by python -m repro dashboard; the folder is replaced on rebuild\n", "utf-8")


class _Cell(NamedTuple):
    """One artifact's row on the overview."""

    status: str
    caveat: str
    summary: str
    page: str | None  # its page in the site, if it has one
    gpus: str
    suite: str | None  # the suite that rebuilds it (snakemake <suite>)


def build_site(
    results_dir: Path | str | None = None, figures_dir: Path | str | None = None, out: Path | str = "site"
) -> Path:
    """Write the site into ``out`` and return the path of ``index.html``. ``out`` must be missing,
    empty or a site built here before (its contents are replaced); else an InputError."""
    from repro.provenance import REPO
    from suites import SUITES, get_suite

    results_dir = Path(results_dir) if results_dir else REPO / "results"
    figures_dir = Path(figures_dir) if figures_dir else REPO / "figures"
    out = Path(out)
    _check_out(out)
    mods = {name: get_suite(name) for name in SUITES}
    frames = {name: load_suite_results(name, results_dir) for name in SUITES}  # all checked before out is touched
    _clear_out(out)
    started = time.perf_counter()

    def said(what: str) -> None:  # a build takes minutes: a line a page
        print(f"[dashboard {time.perf_counter() - started:6.1f}s] {what}", file=sys.stderr, flush=True)

    pages = [n for n in mods if not frames[n].empty]
    for i, name in enumerate(pages, 1):
        _suite_page(name, mods[name], frames[name], figures_dir, out)
        said(f"{name}.html ({i} of {len(pages)} suite pages)")
    _kernels_page(frames, results_dir, out)
    said("kernels page; now the index")

    pi = paper_index()
    idx = pi[["paper", "artifact", "source", "title"]].to_dict("records")
    reasons: dict[tuple[str, str], str] = {}  # why the index says an artifact is not built yet
    notes: dict[tuple[str, str], str] = {}  # title and reason, what _status reads
    for r in pi.fillna("").itertuples():
        reasons[(r.paper, r.artifact)] = r.status_note
        notes[(r.paper, r.artifact)] = f"{r.title} {r.status_note}".lower()
    known = {(r["paper"], r["artifact"]) for r in idx}
    for mod in mods.values():  # suites without a row in the paper index (e.g. a text section)
        if (mod.PAPER, mod.ARTIFACT) not in known:
            idx.append({"paper": mod.PAPER, "artifact": mod.ARTIFACT, "source": "", "title": mod.TITLE})
    by_artifact = {(m.PAPER, m.ARTIFACT): n for n, m in mods.items()}
    cells: dict[tuple[str, str], _Cell] = {}
    for r in idx:
        key = (r["paper"], r["artifact"])
        name = by_artifact.get(key)
        df = frames.get(name) if name else None
        has = df is not None and not df.empty
        status, caveat = _status(df if name else None, mods.get(name) if name else None, notes.get(key, ""))
        if status == "not yet":  # the index says why, where it knows
            caveat = reasons.get(key, "")
        if name and not has:
            summary = "suite ready, no results yet"
        elif has:
            run = _preferred_run(df)
            if hasattr(mods[name], "summary"):
                try:
                    summary = mods[name].summary(run)
                except Exception as e:  # noqa: BLE001 (one suite's broken summary must not break the site)
                    summary = f"summary failed: {type(e).__name__}"
            else:
                summary = _ratio_summary(_safe_compare(mods[name], run))
        else:
            summary = ""
        cells[key] = _Cell(status, caveat, summary, f"{name}.html" if has else None, _gpus(df) if has else "", name)
    verdicts = {k: (c.status, c.page) for k, c in cells.items()}
    for key in [k for k, c in cells.items() if k[1] == "text_claims" and not c.suite]:  # claims made in prose
        status, caveat, summary, body = claims_page(key[0], verdicts)
        page = f"{key[0]}_text_claims.html"
        (out / page).write_text(_page(f"{key[0]}: numeric claims of the text", body), encoding="utf-8")
        cells[key] = _Cell(status, caveat, summary, page, "", None)
    rows = []
    counts: dict[str, int] = {}
    for r in idx:
        status, caveat, summary, page, gpus, name = cells[(r["paper"], r["artifact"])]
        counts[status] = counts.get(status, 0) + 1
        link = f'<a href="{_e(page)}">{_e(r["title"])}</a>' if page else _e(r["title"])
        cls = status.replace(" ", "")
        rows.append(
            "<tr>"
            f"<td>{_e(r['paper'])}</td><td>{_e(r['artifact'])}</td><td>{link}</td>"
            f'<td><span class="badge {cls}" title="{_e(caveat)}">{_e(status)}</span>'
            f'<div class="caveat">{_e(caveat)}</div></td><td>{_e(summary)}</td>'
            f"<td>{_e(gpus)}</td>"
            f"<td>{'<code>snakemake ' + _e(name) + '</code>' if name else ''}</td></tr>"
        )
    head = "".join(
        f"<th>{h}</th>" for h in ("paper", "artifact", "title", "status", "paper vs ours", "ran on", "rebuild")
    )
    with_numbers = len(idx) - counts.get("nothing to reproduce", 0)
    tally = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    body = (
        f"<p>Every table and figure of the papers: <strong>{counts.get('reproduced', 0)} of {with_numbers} "
        f"artifacts with numbers reproduced</strong> ({_e(tally)}). <em>reproduced</em>: our GPU result "
        "matches the paper's stated value within the tolerance given in the caveat; <em>exceeds</em> / "
        "<em>falls short</em>: outside it, above or below; <em>not comparable</em>: the numbers measure "
        "different things (the caveat says why: GPU, baseline, scale); <em>no GPU run</em>: a suite exists "
        "but only smoke/CPU rows are stored; <em>stale</em>: the code behind the results changed since they "
        "were measured and no review says why they stand (the caveat gives the verdict they would have: "
        "re-run the suite); <em>cross-referenced</em>: claims made in the text, each "
        "followed to the artifact, setting or test that checks it; <em>not yet</em>: no suite; <em>nothing to "
        "reproduce</em>: a diagram. How each is measured: docs/methods.md in the repository. "
        'Kernel bandwidth vs roofline: <a href="kernels.html">kernels</a>.</p>'
        f'<table class="sortable" id="artifacts"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )
    index = out / "index.html"
    index.write_text(_page("Structured sparse training: reproduction results", body), encoding="utf-8")
    return index
