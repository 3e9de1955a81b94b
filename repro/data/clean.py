"""Light cleaning of documentation sources for the pretraining corpus: reStructuredText (the Python and
Linux documentation) and POD (Perl's). The aim is the text a reader sees: prose and code samples stay,
markup goes (directive lines, section under/overlines, table borders and other lines of punctuation
only, inline roles, POD commands and formatting codes). Each function maps a string to a string and
is deterministic, so a corpus built from pinned archives is reproducible; none parses perfectly, and
none needs to: a missed construct leaves a little markup in the text, never drops prose.

Also here: the licence named by a Debian package's ``copyright`` file, and SPDX identifiers in sources.
"""

from __future__ import annotations

import html
import re
import textwrap

# ---------------------------------------------------------------------------------------------- reST

# directives whose whole block is dropped: navigation, indexing, build instructions, pictures, and
# directives whose content Sphinx pulls from elsewhere at build time (so the source holds none)
DROP_DIRECTIVES = frozenset(
    [
        "toctree",
        "index",
        "include",
        "literalinclude",
        "kernel-doc",
        "kernel-include",
        "kernel-abi",
        "kernel-feat",
        "kernel-figure",
        "kernel-render",
        "image",
        "figure",
        "raw",
        "highlight",
        "highlightlang",
        "sectionauthor",
        "moduleauthor",
        "codeauthor",
        "contents",
        "tabularcolumns",
        "cssclass",
        "role",
        "default-role",
        "meta",
        "testsetup",
        "testcleanup",
        "c:namespace",
        "c:namespace-push",
        "c:namespace-pop",
        "cpp:namespace",
        "currentmodule",
        "only",
        "ifconfig",
        "productionlist",
        "math",
        "graphviz",
        "digraph",
        "audit-event-table",
        "program-output",
        "sidebar",
        "title",
    ]
)
# directives whose argument is prose worth a lead-in ("Changed in version 3.2: ...")
_LEAD_INS = {
    "versionadded": "New in version {}.",
    "versionchanged": "Changed in version {}:",
    "deprecated": "Deprecated since version {}:",
    "deprecated-removed": "Deprecated since version {}:",
    "note": "Note:",
    "warning": "Warning:",
    "important": "Important:",
    "attention": "Attention:",
    "caution": "Caution:",
    "danger": "Danger:",
    "hint": "Hint:",
    "tip": "Tip:",
    "seealso": "See also:",
    "availability": "Availability: {}.",
}
# directives whose content is code: no inline-markup stripping inside
CODE_DIRECTIVES = frozenset(
    [
        "code-block",
        "sourcecode",
        "code",
        "doctest",
        "testcode",
        "testoutput",
        "parsed-literal",
        "literal",
        "productionlist",
    ]
)

_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([A-Za-z][\w:.+-]*)::(?:\s+(.*))?$")
_COMMENT = re.compile(r"^(\s*)\.\.(?:\s|$)")  # comments, targets (.. _x:), substitutions (.. |x| ...)
_FOOTNOTE = re.compile(r"^(\s*)\.\.\s+(\[[^\]]+\].*)$")  # .. [1] text: kept as "[1] text"
_OPTION = re.compile(r"^\s*:[\w -]+:(?:\s.*)?$")  # :maxdepth: 2 (a directive's options)
_INLINE = re.compile(r"(``[^`]+?``|(?::[\w:.+-]+:)?`[^`]+?`(?::[\w:.+-]+:)?(?:__?)?)")
_ROLE = re.compile(r"(?::[\w:.+-]+:)?`([^`]+?)`(?::[\w:.+-]+:)?(?:__?)?", re.S)
_STRONG = re.compile(r"\*\*(\S(?:[^*]*?\S)?)\*\*")
_EMPH = re.compile(r"(?<![\w*\\])\*(\S(?:[^*]*?\S)?)\*(?![\w*])")
_LINK_TARGET = re.compile(r"^(.*?)\s*<[^<>]+>$", re.S)
_REF = re.compile(r"\b([A-Za-z0-9](?:[A-Za-z0-9.-]|_(?!_))*[A-Za-z0-9]|[A-Za-z0-9])__?(?=[\s.,;:!?)\]]|$)")
_SUBST = re.compile(r"\|(\w[\w .-]*)\|(?:__?)?")


def punctuation_line(line: str) -> bool:
    """A line of 4 or more characters without a letter or digit: a section adornment, a table border,
    a rule, box drawing. Never text a reader reads."""
    s = line.strip()
    return len(s) >= 4 and not any(c.isalnum() for c in s)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _role_text(m: re.Match) -> str:
    text = m.group(1)
    hit = _LINK_TARGET.match(text)  # `text <target>`_ and :ref:`text <label>` -> text
    if hit and hit.group(1):
        text = hit.group(1)
    return text.lstrip("~!")  # :func:`~os.path.join` shows as join; keep the dotted name


def rest_inline(text: str) -> str:
    """Inline reST markup of a paragraph: roles, links, references, substitutions, emphasis -> their
    text; ``literal`` -> `literal` (code stays marked, as in Markdown)."""
    parts = _INLINE.split(text)
    out = []
    for i, p in enumerate(parts):
        if i % 2:
            out.append(f"`{p[2:-2]}`" if p.startswith("``") else _ROLE.sub(_role_text, p))
            continue
        p = _SUBST.sub(r"\1", p)
        p = _REF.sub(r"\1", p)
        p = _STRONG.sub(r"\1", p)
        p = _EMPH.sub(r"\1", p)
        out.append(p.replace("\\ ", "").replace("\\", "") if "\\" in p else p)
    return "".join(out)


def _grid_row(line: str) -> str:
    """A grid-table row ``| a | b |`` -> ``a | b`` (cells without their padding; empty cells dropped)."""
    cells = [c.strip() for c in _SUBST.sub(r"\1", line).strip().strip("|").split("|")]
    return " " * _indent(line) + rest_inline(" | ".join(c for c in cells if c))


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """Index after the indented block that starts at ``start``: lines indented more than ``indent``
    (or blank) up to the first line that is not."""
    j = start
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > indent):
        j += 1
    while j > start and not lines[j - 1].strip():  # trailing blank lines belong to what follows
        j -= 1
    return j


def clean_rest(text: str) -> str:
    """reStructuredText source -> the text of the page, lightly: see the module docstring.

    Dropped: comments and targets (``.. _label:``, ``.. SPDX-License-Identifier: ...``), the blocks of
    :data:`DROP_DIRECTIVES`, directive options, lines of punctuation only (section adornments, table
    borders). Kept: prose with inline markup reduced to its text (:func:`rest_inline`); a directive's
    argument where it is content (a function signature, ``Changed in version 3.2:``) and its body;
    literal blocks (after ``::``), doctest blocks and code directives verbatim, dedented as a whole.
    """
    lines = text.replace("\t", "        ").split("\n")
    out: list[str] = []
    prose: list[str] = []  # the paragraph being collected: inline markup is reduced per paragraph
    i = 0
    literal_from = None  # indentation of the paragraph that ended in "::": what follows is code

    def flush() -> None:
        if prose:
            out.extend(rest_inline("\n".join(prose)).split("\n"))
            prose.clear()

    def emit(block: list[str], indent: int = 0) -> None:
        flush()
        out.extend(" " * indent + x if x.strip() else "" for x in block)

    def emit_code(block: list[str]) -> None:
        emit(textwrap.dedent("\n".join(block)).split("\n"))

    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        ind = _indent(line)
        if literal_from is not None and stripped:
            if ind > literal_from:  # a literal block: verbatim, dedented
                end = _block_end(lines, i, literal_from)
                emit_code(lines[i:end])
                i = end
                literal_from = None
                continue
            literal_from = None
        if not stripped:
            emit([""])
            i += 1
            continue
        d = _DIRECTIVE.match(line)
        if d:
            name, arg = d.group(2).lower(), (d.group(3) or "").strip()
            end = _block_end(lines, i + 1, ind)
            body = lines[i + 1 : end]
            head = [arg] if arg else []
            if arg:  # continuation lines of the argument (more signatures), up to a blank line
                while body and body[0].strip() and not _OPTION.match(body[0]):
                    head.append(body.pop(0).strip())
            while body and _OPTION.match(body[0]):  # then the options
                body.pop(0)
            i = end
            if name in DROP_DIRECTIVES:
                continue
            short = name.split(":")[-1]
            if short in CODE_DIRECTIVES:
                emit_code(body)
                continue
            lead = _LEAD_INS.get(short)
            if lead:  # one line: the lead-in, the argument, and the first paragraph of the body
                if not arg:
                    while body and not body[0].strip():
                        body.pop(0)
                    while body and body[0].strip():
                        head.append(body.pop(0).strip())
                if "{}" in lead:
                    head = [lead.format(head[0] if head else ""), *head[1:]]
                head = [" ".join([lead, *head] if "{}" not in lead else head)]
            emit([rest_inline(h) for h in head], ind)
            if body:
                emit([""])
                emit(clean_rest(textwrap.dedent("\n".join(body))).split("\n"), ind)
            continue
        f = _FOOTNOTE.match(line)
        if f:
            emit([rest_inline(f.group(2))], ind)
            i += 1
            continue
        if _COMMENT.match(line):  # a comment with its indented continuation
            flush()
            i = _block_end(lines, i + 1, ind)
            continue
        if stripped == "::":  # a lone "::" introduces a literal block and shows as nothing
            flush()
            literal_from = ind
            i += 1
            continue
        if punctuation_line(line):
            i += 1
            continue
        if stripped.startswith("|") and stripped.endswith("|") and len(stripped) > 1:
            emit([_grid_row(line)])
            i += 1
            continue
        if stripped.startswith(">>> "):  # a doctest block: code, up to the next blank line
            end = i
            while end < len(lines) and lines[end].strip():
                end += 1
            emit_code(lines[i:end])
            i = end
            continue
        if stripped.endswith("::"):  # "Example::" shows as "Example:", "Example ::" as "Example"
            body = line.rstrip()[:-2]
            prose.append(body.rstrip() if body.endswith(" ") else body + ":")
            flush()
            literal_from = ind
            i += 1
            continue
        prose.append(line)
        i += 1
    flush()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(x.rstrip() for x in out)).strip("\n")


# ----------------------------------------------------------------------------------------------- POD

_POD_COMMAND = re.compile(r"^=([a-zA-Z]\w*)\s*(.*)$")
_POD_CODE = re.compile(r"(?<![A-Z])([BCEFILSXZ])(<+)")
_POD_ESCAPES = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/", "quot": '"', "amp": "&", "apos": "'"}


def _pod_escape(name: str) -> str:
    name = name.strip()
    if name in _POD_ESCAPES:
        return _POD_ESCAPES[name]
    try:
        if name.lower().startswith("0x"):
            return chr(int(name, 16))
        if name.isdigit():
            return chr(int(name, 8 if name.startswith("0") and len(name) > 1 else 10))  # perlpodspec: 0NNN octal
    except (ValueError, OverflowError):
        return ""
    got = html.unescape(f"&{name};")
    return "" if got == f"&{name};" else got


def _pod_link(body: str) -> str:
    """``L<text|name/"section">`` -> ``text``; ``L<name/"sec">`` -> ``"sec" in name``; ``L</sec>`` -> ``"sec"``."""
    if "|" in body:
        return body.split("|", 1)[0]
    if re.match(r"\w+:[^:\s]\S*$", body):  # a URL
        return body
    name, sep, section = body.partition("/")
    if not sep:
        return name
    section = section.strip('"')
    return f'"{section}" in {name}' if name else f'"{section}"'


def pod_inline(text: str) -> str:
    """POD formatting codes -> their text: ``B<x>``, ``I<x>``, ``F<x>``, ``S<x>`` -> x; ``C<x>`` ->
    `x`; ``L<...>`` -> the link's text; ``E<lt>`` -> <; ``X<...>``, ``Z<>`` -> nothing. The
    ``C<< x >>`` forms with more brackets are handled; an unmatched code is left as it is."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        m = _POD_CODE.search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i : m.start()])
        code, opens = m.group(1), len(m.group(2))
        start = m.end()
        if opens > 1 and start < n and text[start] in " \t\n":
            close = re.compile(r"\s" + ">" * opens).search(text, start)
            if not close:
                out.append(m.group(0))
                i = start
                continue
            inner, i = pod_inline(text[start : close.start()].strip()), close.end()
        elif opens > 1:  # "E<<": not a formatting code
            out.append(m.group(0))
            i = start
            continue
        else:  # single brackets: nested codes allowed, the first ">" not theirs closes
            depth, j = 1, start
            while j < n:
                inner_code = _POD_CODE.match(text, j)
                if inner_code and (j == 0 or not text[j - 1].isupper()):
                    k, opens_in = inner_code.end(), len(inner_code.group(2))
                    if opens_in > 1 and k < n and text[k] in " \t\n":  # a nested C<< x >>: skip it whole
                        close = re.compile(r"\s" + ">" * opens_in).search(text, k)
                        j = close.end() if close else k
                    else:
                        depth += 1
                        j = k
                    continue
                if text[j] == ">":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= n:
                out.append(m.group(0))
                i = start
                continue
            inner, i = pod_inline(text[start:j]), j + 1
        if code == "E":
            out.append(_pod_escape(inner))
        elif code == "C":
            out.append(f"`{inner}`")
        elif code == "L":
            out.append(_pod_link(inner))
        elif code in "XZ":
            pass
        else:
            out.append(inner)
    return "".join(out)


def clean_pod(text: str) -> str:
    """Perl POD source -> the text of the page: see the module docstring.

    Commands: ``=head1 NAME`` -> ``NAME``; ``=item * x`` -> ``* x``; ``=over``, ``=back``, ``=pod``,
    ``=cut``, ``=encoding`` dropped; ``=begin``..``=end`` and ``=for`` blocks dropped unless for
    ``text``; code outside ``=pod``..``=cut`` dropped. Verbatim (indented) paragraphs are code: kept
    as they are, dedented. Other paragraphs: formatting codes reduced by :func:`pod_inline`.
    """
    paras = re.split(r"\n[ \t]*\n", text.replace("\r\n", "\n"))
    out: list[str] = []
    in_pod = not text.lstrip().startswith(("#!", "package ", "use "))
    skip_until: str | None = None
    verbatim: int | None = None  # index in out of the verbatim run being collected
    for para in paras:
        if not para.strip():
            continue
        first = para.lstrip("\n")
        if first[:1] not in " \t":
            verbatim = None
        cmd = _POD_COMMAND.match(first.split("\n", 1)[0])
        if skip_until is not None:
            if cmd and cmd.group(1) == "end" and cmd.group(2).split()[:1] == [skip_until]:
                skip_until = None
            continue
        if cmd:
            name, arg = cmd.group(1), cmd.group(2)
            rest = first.split("\n", 1)[1] if "\n" in first else ""
            if name == "cut":
                in_pod = False
                continue
            in_pod = True
            if name in ("pod", "over", "back", "encoding"):
                continue
            if name == "begin":
                fmt = (arg.split() or [""])[0]
                if fmt.lstrip(":") != "text":
                    skip_until = fmt
                continue
            if name == "end":
                continue
            if name == "for":
                fmt, _, body = f"{arg}\n{rest}".partition(" ")
                if fmt.lstrip(":") == "text":
                    out.append(pod_inline(body.strip()))
                continue
            words = " ".join(f"{arg} {rest}".split())
            if name == "item":
                words = re.sub(r"^\*\s*", "* ", words) if words != "*" else ""
            if words:
                out.append(pod_inline(words))
            continue
        if not in_pod:
            continue
        if first[:1] in " \t":  # verbatim paragraph: code, dedented with the verbatim paragraphs next to it
            if verbatim is None:
                verbatim = len(out)
                out.append("")
            code = first.expandtabs(8).rstrip()
            out[verbatim] = f"{out[verbatim]}\n\n{code}" if out[verbatim] else code
            continue
        out.append(" ".join(pod_inline(first).split()))
    return "\n\n".join(textwrap.dedent(p.expandtabs(8)).strip("\n") for p in out if p.strip())


# ------------------------------------------------------------------------------------------ licences

_SPDX = re.compile(r"SPDX-License-Identifier:\s*([^\n*]+?)\s*(?:\*/)?\s*$", re.M)


def spdx_identifiers(text: str) -> list[str]:
    """The ``SPDX-License-Identifier`` expressions a source file declares (usually one, or none)."""
    return [s for s in _SPDX.findall(text) if not s.startswith("<")]


def debian_licence(copyright_text: str) -> str:
    """The licence a Debian ``copyright`` file names for the package as a whole: the ``License:`` of
    its ``Files: *`` stanza (machine-readable format), else the first licence heading of a free-form
    file ("PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2"); "" if neither is found."""
    if copyright_text.startswith("Format:"):
        for stanza in re.split(r"\n\s*\n", copyright_text):
            fields = dict(re.findall(r"^([\w-]+):[ \t]*(.*)$", stanza, re.M))
            if fields.get("Files", "").split() == ["*"] and fields.get("License"):
                return fields["License"].strip()
    for line in copyright_text.splitlines():
        s = line.strip()
        if re.fullmatch(r"[A-Z][A-Z0-9 .,/()-]*LICEN[CS]E[A-Z0-9 .,/()-]*", s) and len(s.split()) >= 3:
            return s
    return ""
