"""The dashboard's page for a paper's numeric text claims: each claim beside where this project
measures it, runs with it or tests it (``repro/paper_data/checks_text_claims.csv``), so that a claim
made in prose is followed to the artifact row whose verdict applies instead of reading "not yet"."""

from __future__ import annotations

from html import escape

from repro.paper import text_claim_checks


def _e(x: object) -> str:
    return escape(str(x))  # quotes too: values go into attributes


STATUS = "cross-referenced"  # every claim of the paper is measured, set, tested or context elsewhere
# What a kind of check says, in the page's words.
KIND_WORDS = {
    "measured": "measured in",
    "setting": "we run with it",
    "tested": "a test checks it",
    "context": "nothing to measure here",
    "not built": "not built",
}


def _value(v: float, unit: str) -> str:
    return f"{v:.4g}" if unit in ("", "dimensionless") else f"{v:.4g} {unit}"


def claims_page(paper: str, artifacts: dict[tuple[str, str], tuple[str, str | None]]) -> tuple[str, str, str, str]:
    """(status, caveat, summary, page body) for ``paper``'s text claims. ``artifacts`` maps
    (paper, artifact) to (its status on the overview, its page or None). The status is "not yet"
    where any claim needs something not built here, else :data:`STATUS`."""
    df = text_claim_checks(paper)
    rows = []
    for r in df.itertuples(index=False):
        where = ""
        if r.checked_by:
            key = tuple(r.checked_by.split(" ", 1))
            if key not in artifacts:
                raise ValueError(f"checks_text_claims.csv: {paper} {r.metric} names unknown artifact {r.checked_by!r}")
            status, target = artifacts[key]
            label = _e(r.checked_by)
            link = f'<a href="{_e(target)}">{label}</a>' if target else label
            where = f"{link} ({_e(status)})" if r.kind == "measured" else link
        if r.where:
            where = f"{where}<br><code>{_e(r.where)}</code>" if where else f"<code>{_e(r.where)}</code>"
        rows.append(
            f"<tr><td>{_e(r.source)}</td><td>{_e(r.method)}</td><td>{_e(r.metric)}</td>"
            f'<td class="num">{_e(_value(r.value, r.unit))}</td><td>{_e(KIND_WORDS[r.kind])}</td>'
            f"<td>{where}</td><td>{_e(r.check_note)}</td></tr>"
        )
    head = "".join(f"<th>{h}</th>" for h in ("source", "method", "claim", "paper", "check", "where", "note"))
    counts = df["kind"].value_counts()
    summary = f"{len(df)} claims: " + ", ".join(f"{counts[k]} {k}" for k in KIND_WORDS if k in counts)
    body = (
        f"<p>The numeric claims of {_e(paper)}'s text, each beside where this project checks it. "
        "<em>measured in</em>: an artifact of ours measures the same quantity, and its status (in brackets) "
        "is the verdict on the claim (elsewhere a link only points to related numbers); <em>we run with it</em>: "
        "a setting the suites use (a test checks that "
        "the code's value equals the paper's); <em>a test checks it</em>: a pytest test; <em>nothing to "
        "measure here</em>: a citation, a hardware figure or a training budget; <em>not built</em>: it needs "
        f"what this project does not have.</p><p>{_e(summary)}.</p>"
        f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )
    missing = df[df["kind"] == "not built"]
    if not missing.empty:
        return "not yet", f"{len(missing)} of {len(df)} claims need what is not built here", summary, body
    return STATUS, "each claim is measured, set or tested where the page says", summary, body
