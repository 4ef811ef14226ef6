"""The ladder people copy: each rung differs from the one below only in its
lesson's marked lines (`# DDP n` from one process to DDP, `# FT n` from DDP to
fault tolerance), the DDP script shows every step itself, and the example
differs from it only in the marked place where users plug in their own data,
model and task."""

import ast
import difflib
import re

from helpers import DDP, EXAMPLE, FAULT_TOLERANT, SINGLE, parser_of

DDP_CALLS = [
    "init_process_group",
    "set_epoch",
    "DistributedDataParallel(",
    "no_sync",
    "all_reduce",
    "broadcast",
    "add_scalar",
    "destroy_process_group",
    "barrier",
    "all_gather_object",
]


def hunks(old, new):
    """(old lines, new lines, old span, new span) of every change from old to new."""
    a, b = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [
        (a[i1:i2], b[j1:j2], (i1, i2), (j1, j2))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def _indent(line):
    return len(line) - len(line.lstrip())


MARK = {
    "DDP": lambda line: "ddp" in line.lower() or "dist." in line,
    "FT": lambda line: "# FT" in line,
}
_marked = MARK["DDP"]


def covered_lines(lines, marked=None):
    """Which lines of a script a DDP mark covers: a line that mentions DDP
    (or calls torch.distributed), the lines indented under it (its
    continuation and body), and the paragraph after a `# DDP` comment (until
    a blank line or a dedent)."""
    marked = marked or _marked
    covered, comment_indent, code_indent = [False] * len(lines), None, None
    for i, line in enumerate(lines):
        stripped, indent = line.strip(), _indent(line)
        if not stripped:
            comment_indent = code_indent = None
            continue
        if comment_indent is not None and indent < comment_indent:
            comment_indent = None
        if code_indent is not None and indent <= code_indent:
            code_indent = None
        if marked(line):
            covered[i] = True
            if stripped.startswith("#"):
                comment_indent = indent
            elif code_indent is None:
                code_indent = indent
        else:
            covered[i] = comment_indent is not None or code_indent is not None
    return covered


def without_docstring(text):
    """The module docstring says what each twin is; it differs by design."""
    return '""""""' + text.split('"""', 2)[2]


def unmarked_changes(single, ddp, kind="DDP"):
    """Lines that differ between two neighbouring rungs (below their docstrings) and that
    no mark of the upper rung's lesson covers."""
    single, ddp = without_docstring(single), without_docstring(ddp)
    ddp_lines = ddp.splitlines()
    unmarked = []
    for old, new, _, (j1, j2) in hunks(single, ddp):
        if not new and not any(MARK[kind](line) for line in old):
            unmarked += [f"only in the lower rung: {line}" for line in old]
        # a mark covers lines of its own change only: an edit elsewhere in its paragraph,
        # landing in one rung alone, is caught
        covered = covered_lines(ddp_lines[j1:j2], MARK[kind])
        unmarked += [
            f"upper rung:{j + 1}: {ddp_lines[j]}"
            for j in range(j1, j2)
            if ddp_lines[j].strip() and not covered[j - j1]
        ]
    return unmarked


def test_the_twins_differ_only_in_ddp_steps():
    assert unmarked_changes(SINGLE.read_text(), DDP.read_text()) == []


def test_the_fault_tolerant_rung_differs_from_the_ddp_rung_only_in_ft_lines():
    ddp, ft = DDP.read_text(), FAULT_TOLERANT.read_text()
    assert unmarked_changes(ddp, ft, "FT") == []
    steps = sorted({int(n) for n in re.findall(r"# FT (\d)\b", ft)})
    assert steps == list(range(1, 8))
    loop_line = "        state.end_epoch(row, model, task, seconds=time.perf_counter() - started)"
    assert loop_line in ft
    assert unmarked_changes(ddp, ft.replace(loop_line, loop_line + "  # changed"), "FT")


def test_the_ddp_script_reads_in_one_sitting_and_imports_few_partorch_names():
    text = DDP.read_text()
    assert len(text.splitlines()) <= 230
    names = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] == "partorch":
            names += [alias.name for alias in node.names]
            assert node.module in ("partorch", "partorch.molecules"), node.module
    assert len(names) <= 15, names


def test_a_change_landing_in_one_twin_only_is_caught():
    single, ddp = SINGLE.read_text(), DDP.read_text()
    old = 'scaler = torch.amp.GradScaler(enabled=args.amp == "fp16")'
    new = "scaler = torch.amp.GradScaler(enabled=True)"
    assert old in single and old in ddp
    assert unmarked_changes(single, ddp.replace(old, new))  # only in the DDP twin: caught
    assert unmarked_changes(single.replace(old, new), ddp)  # only in the single twin: caught
    assert unmarked_changes(single.replace(old, new), ddp.replace(old, new)) == []  # in both: fine


def _code_lines(text):
    """Lines with their comments and the docstring cut away: what runs."""
    body = text.split('"""', 2)[2]
    return [line.split("#", 1)[0] for line in body.splitlines()]


def test_the_ddp_script_makes_every_ddp_call_itself_and_numbers_its_steps():
    text = DDP.read_text()
    code = "\n".join(_code_lines(text))
    for call in DDP_CALLS:
        assert call in code, call
    single_code = "\n".join(_code_lines(SINGLE.read_text()))
    for call in (
        "init_process_group",
        "DistributedDataParallel(",
        "no_sync",
        "all_reduce",
        "broadcast",
        "barrier",
    ):
        assert call not in single_code, call
    steps = sorted({int(n) for n in re.findall(r"# DDP (\d)\b", text)})
    assert steps == list(range(1, 9))


def _region(lines, start_marker, end_marker):
    start = next(i for i, line in enumerate(lines) if line.startswith(start_marker))
    end = next(i for i, line in enumerate(lines) if line.startswith(end_marker))
    return start, end


def _inside(span, regions):
    low, high = span
    return any(start <= low and high <= end + 1 for start, end in regions)


def adaptable_regions(text):
    lines = text.splitlines()
    docstring_end = next(i for i, line in enumerate(lines[1:], 1) if line.startswith('"""'))
    adapt = _region(
        lines,
        "# ============================ ADAPT",
        "# ========================================= END ADAPT",
    )
    return [(0, docstring_end), adapt]


def changes_outside_the_marked_places(original, copy):
    allowed_a, allowed_b = adaptable_regions(original), adaptable_regions(copy)
    return [
        h
        for h in hunks(original, copy)
        if not (_inside(h[2], allowed_a) and _inside(h[3], allowed_b))
    ]


def test_the_example_changes_only_the_marked_place_of_the_ddp_script():
    ddp, example = DDP.read_text(), EXAMPLE.read_text()
    assert hunks(ddp, example)  # it is adapted...
    assert changes_outside_the_marked_places(ddp, example) == []  # ...only where the script says to
    # an edit to the loop, outside the marked place, is caught
    loop_line = "        row.update(scores[0])"
    assert loop_line in example
    assert changes_outside_the_marked_places(
        ddp, example.replace(loop_line, loop_line + "  # changed")
    )


def test_every_rung_declares_its_flags_in_groups_that_help_shows():
    expected = {
        path: ["data", "model", "training", "distributed", "output"]
        for path in (SINGLE, DDP, FAULT_TOLERANT, EXAMPLE)
    }
    for path, groups in expected.items():
        parser = parser_of(path)
        titles = [g.title for g in parser._action_groups if g._group_actions]
        assert [t for t in titles if t not in ("positional arguments", "options")] == groups, path
        assert all(title + ":" in parser.format_help() for title in groups)
    # the flags only the fault-tolerant rung can honour are its own
    assert "--distributed-eval" in parser_of(FAULT_TOLERANT).format_help()
    assert "--distributed-eval" not in parser_of(DDP).format_help()
    # every rung takes the contract's flags, so one job file can call any of them
    assert parser_of(SINGLE).parse_args(["x.csv", "--dist-timeout", "60"]).dist_timeout == 60
