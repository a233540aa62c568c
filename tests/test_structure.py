"""The layout rules of docs/architecture.md, checked on the source: no import cycle in t2n/
(t2n/mappings/ included), op families never import each other (only the registry, the builder layer
and t2n/mappings/helpers), helpers never import a family, and no module over 600 lines. The
documentation's layout too: README.md stays a quick start (at most 15,000 characters, the
manual lives in docs/), and every relative link of README.md, CHANGELOG.md and docs/*.md reaches a file
and, with a ``#fragment``, a heading of it.

Imports are read with ``ast`` from every statement, including those inside functions (a
lazy import is still a dependency). ``importlib.import_module("...")`` with a string is
plugin loading (the registry loading the mapping package, the pass pipeline loading its
passes) and is not an edge.
"""

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("t2n",)  # the one installed package; op families live in t2n.mappings
MAX_LINES = 600
# what an op family may import from the engine: the registry and the builder layer (the
# graph, its tensor handles, loops, dtypes, errors); not t2n.write.nnef_text: mappings never
# write NNEF text
FAMILY_MAY_IMPORT = {"t2n.walk.registry", "t2n.walk.builder", "t2n.walk.tensors",
                     "t2n.walk.loops", "t2n.dtypes", "t2n.errors"}


def _modules() -> dict[str, str]:
    """{dotted module name: path} for every .py file of the package."""
    out = {}
    for pkg in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, pkg)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in filenames:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), ROOT)[:-3]
                    parts = rel.split(os.sep)
                    if parts[-1] == "__init__":
                        parts = parts[:-1]
                    out[".".join(parts)] = os.path.join(dirpath, f)
    return out


MODULES = _modules()


def _is_package(mod: str) -> bool:
    return MODULES[mod].endswith("__init__.py")


def _imports(mod: str) -> set[str]:
    """The modules of the package that ``mod`` imports (anywhere in its body)."""
    tree = ast.parse(open(MODULES[mod], encoding="utf-8").read(), MODULES[mod])
    here = mod if _is_package(mod) else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            # ``from pkg import sub`` imports the submodule pkg.sub
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:  # ``import a.b.c`` of a name inside a module
                t = t.rpartition(".")[0]
            if t and t != mod:
                out.add(t)
    return out


GRAPH = {m: _imports(m) for m in MODULES}


def _family(mod: str) -> str | None:
    """The op family a module belongs to (``t2n.mappings.<family>`` or a module of the
    ``t2n/mappings/<family>/`` package), None for the helpers layer and the package itself."""
    parts = mod.split(".")
    if parts[:2] != ["t2n", "mappings"] or len(parts) < 3 or parts[2] == "helpers":
        return None
    return parts[2]


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return comps


def test_the_checker_sees_the_layout():
    """Guards the checks below against passing on an empty or misread tree."""
    assert {"t2n.api", "t2n.walk.walker", "t2n.walk.builder", "t2n.passes", "t2n.mappings.gather",
            "t2n.mappings.helpers.indexing"} <= set(MODULES)
    assert "t2n.walk.builder" in GRAPH["t2n.walk.walker"]
    assert "t2n.mappings.helpers.indexing" in GRAPH["t2n.mappings.gather"]
    assert "t2n.passes" in GRAPH["t2n.api"]


def test_no_import_cycle():
    cycles = _cycles()
    assert not cycles, "import cycles (modules importing each other, directly or not): " + \
        "; ".join(" <-> ".join(c) for c in cycles)


def test_op_families_import_only_registry_builder_and_helpers():
    bad = []
    for mod, deps in sorted(GRAPH.items()):
        fam = _family(mod)
        if fam is None:
            continue
        for dep in sorted(deps):
            if dep.startswith("t2n.mappings.helpers") or dep in FAMILY_MAY_IMPORT:
                continue
            if _family(dep) == fam:  # modules of one family package
                continue
            bad.append(f"{mod} imports {dep}")
    assert not bad, ("op families may import only t2n.walk.registry, the builder layer "
                     f"({', '.join(sorted(FAMILY_MAY_IMPORT))}) and t2n.mappings.helpers; "
                     "move a shared helper into t2n/mappings/helpers/ or call another op's "
                     "mapping through t2n.walk.registry.lookup:\n  " + "\n  ".join(bad))


def test_helpers_never_import_a_family_or_the_engine_above_the_builder():
    bad = [f"{mod} imports {dep}" for mod, deps in sorted(GRAPH.items())
           if mod.startswith("t2n.mappings.helpers") for dep in sorted(deps)
           if _family(dep) is not None or dep == "t2n.mappings"
           or (not dep.startswith("t2n.mappings.helpers") and dep not in FAMILY_MAY_IMPORT)]
    assert not bad, "helpers sit below the families:\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_module_over_600_lines(pkg):
    long = sorted((n, m) for m, p in MODULES.items() if m.split(".")[0] == pkg
                  for n in [sum(1 for _ in open(p, encoding="utf-8"))] if n > MAX_LINES)
    assert not long, (f"modules over {MAX_LINES} lines (split them along their seams, see "
                      "docs/architecture.md): " + ", ".join(f"{m} ({n})" for n, m in long))


# ------------------------------------------------------------------- the export session
GRAPH_HOMES = {"t2n.walk.builder", "t2n.walk.loops"}  # Graph and its loop-body subclass
_GRAPH_NAMES = {"g", "graph", "body", "root", "outer"}


def _is_graph(node) -> bool:
    """``g``, ``graph``, ``self.g``...: the names the package gives a Graph."""
    if isinstance(node, ast.Name):
        return node.id in _GRAPH_NAMES
    return isinstance(node, ast.Attribute) and node.attr in _GRAPH_NAMES \
        and isinstance(node.value, ast.Name) and node.value.id == "self"


def _graph_fields() -> set[str]:
    """The attributes ``Graph.__init__`` declares (``self.x = ...``)."""
    tree = ast.parse(open(MODULES["t2n.walk.builder"], encoding="utf-8").read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Graph")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return {t.attr for n in ast.walk(init) if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Attribute)}


def _trees():
    for mod, path in sorted(MODULES.items()):
        yield mod, ast.parse(open(path, encoding="utf-8").read(), path)


def test_no_state_is_written_onto_a_graph_outside_its_module():
    """Export-wide state lives in t2n.session.ExportSession: no ``g.__dict__``, no
    ``setattr(g, ...)`` and no ``g.name = ...`` of an attribute ``Graph`` does not declare,
    outside the graph's own modules."""
    bad = []
    for mod, tree in _trees():
        if mod in GRAPH_HOMES:
            continue
        for node in ast.walk(tree):
            where = f"{mod}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and node.attr == "__dict__" \
                    and _is_graph(node.value):
                bad.append(f"{where} reads or writes the graph's __dict__")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "setattr" and node.args and _is_graph(node.args[0]):
                bad.append(f"{where} setattr on a graph")
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                bad += [f"{where} sets graph attribute {t.attr}, which Graph does not declare"
                        for t in targets if isinstance(t, ast.Attribute)
                        and _is_graph(t.value) and t.attr not in _graph_fields()]
    assert not bad, ("state written onto a graph (put it in t2n.session.ExportSession):\n  "
                     + "\n  ".join(bad))


_NAMED_CONCEPTS = {"tract", "khronos", "q4_0"}  # target and weight-format names


def _compares_a_concept(node) -> str | None:
    if not isinstance(node, ast.Compare):
        return None
    for x in [node.left, *node.comparators]:
        if isinstance(x, ast.Attribute) and x.attr in ("target", "weights"):
            return f"compares .{x.attr}"
        if isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute) \
                and x.func.attr == "get" and x.args and isinstance(x.args[0], ast.Constant) \
                and x.args[0].value in ("target", "weights"):
            return f"compares the {x.args[0].value!r} option"
        values = x.elts if isinstance(x, (ast.Tuple, ast.List, ast.Set)) else [x]
        named = [v.value for v in values if isinstance(v, ast.Constant)
                 and v.value in _NAMED_CONCEPTS]
        if named:
            return f"compares with {named[0]!r}"
    return None


def test_passes_and_mappings_never_compare_a_target_or_format_name():
    """Targets and weight formats answer through their own tables (session.target.can(...),
    session.weights.compresses); a pass or mapping never tests their names."""
    bad = [f"{mod}:{node.lineno} {why}" for mod, tree in _trees()
           if mod.startswith(("t2n.passes", "t2n.mappings")) for node in ast.walk(tree)
           for why in [_compares_a_concept(node)] if why]
    assert not bad, "name comparisons of targets or formats:\n  " + "\n  ".join(bad)


def test_the_concept_checks_see_a_comparison():
    """Guards the two checks above against passing on a misread tree."""
    tree = ast.parse('if session.target != "tract" or options.get("weights") == "q4_0":\n'
                     '    g.__dict__["x"] = 1\n    g.y = 2\n')
    assert sum(1 for n in ast.walk(tree) if _compares_a_concept(n)) == 2
    assert _is_graph(ast.parse("self.g").body[0].value)
    assert {"ops", "node", "session"} <= _graph_fields() and "storage" not in _graph_fields()


def test_export_reads_as_its_pipeline():
    """``export()`` is the pipeline: session -> capture -> walk -> passes -> lowering ->
    write -> verify, in at most 60 lines (docstring included)."""
    tree = ast.parse(open(MODULES["t2n.api"], encoding="utf-8").read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "export")
    length = fn.end_lineno - fn.decorator_list[0].lineno + 1
    assert length <= 60, f"t2n.api.export is {length} lines, over 60"


CHILD_HOMES = {"t2n.check.child", "t2n.check.served"}  # run_child; the long-lived workers


def test_child_processes_start_in_one_place():
    """Every child program starts through t2n.check.child (one timeout and crash policy);
    only the long-lived workers (t2n.check.served) open their own pipe, from child.command()."""
    bad = [f"{mod}:{node.lineno}" for mod, tree in _trees() if mod not in CHILD_HOMES
           for node in ast.walk(tree) if isinstance(node, ast.Attribute)
           and isinstance(node.value, ast.Name) and node.value.id == "subprocess"
           and node.attr in ("run", "Popen", "call", "check_call", "check_output")]
    assert not bad, "subprocesses started outside t2n.check.child:\n  " + "\n  ".join(bad)


def test_one_installed_package():
    """The distribution installs t2n only (op families are t2n.mappings; the fixtures live
    in tests/ and are not installed)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        setup = tomllib.load(f)["tool"]["setuptools"]
    assert setup["packages"] == {"find": {"include": ["t2n*"]}}, setup["packages"]
    from setuptools import find_packages

    found = find_packages(ROOT, include=["t2n*"])
    assert found and all(p == "t2n" or p.startswith("t2n.") for p in found), found
    assert "t2n.mappings" in found and "t2n.walk" in found


# ------------------------------------------------------------------------------ the docs

README_MAX_CHARS = 15_000
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def _doc_files() -> list[str]:
    docs = os.path.join(ROOT, "docs")
    return [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def _prose(path: str) -> str:
    """The text of a Markdown file without its code blocks and inline code (a link-like
    string inside code is not a link)."""
    text = open(path, encoding="utf-8").read()
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def _anchors(path: str) -> set[str]:
    """The fragment ids GitHub gives the headings of a Markdown file: lower case, spaces
    to hyphens, punctuation other than hyphens and underscores dropped."""
    out = set()
    for line in _FENCE.sub("", open(path, encoding="utf-8").read()).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            title = m.group(1).strip().lower().replace("`", "")
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def _relative_links(path: str) -> list[str]:
    return [t for t in _LINK.findall(_prose(path))
            if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto:, ...


def test_readme_is_a_quick_start():
    """Counted as `wc -c` counts: bytes."""
    size = len(open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().encode())
    assert size <= README_MAX_CHARS, (
        f"README.md is {size:,} bytes, over {README_MAX_CHARS:,}: move the details into a "
        "page of docs/ and link it from README.md's manual table")


def test_the_link_checker_sees_the_links():
    """Guards the check below against passing on files it cannot read."""
    readme = os.path.join(ROOT, "README.md")
    assert "docs/api.md" in _relative_links(readme)
    assert "cli.md#t2n-export" in _relative_links(os.path.join(ROOT, "docs", "troubleshooting.md"))
    assert "t2n-export" in _anchors(os.path.join(ROOT, "docs", "cli.md"))
    assert "fast-archives-what-the-export-folds-and-fuses" in _anchors(
        os.path.join(ROOT, "docs", "performance.md"))


def test_relative_links_in_the_docs_resolve():
    broken = []
    for path in _doc_files():
        for target in _relative_links(path):
            file, _, fragment = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            where = f"{os.path.relpath(path, ROOT)}: ({target})"
            if not os.path.exists(dest):
                broken.append(f"{where}: no file {os.path.relpath(dest, ROOT)}")
            elif fragment and dest.endswith(".md") and fragment not in _anchors(dest):
                broken.append(f"{where}: no heading #{fragment} in {os.path.relpath(dest, ROOT)}")
    assert not broken, "broken links:\n  " + "\n  ".join(broken)


# ------------------------------------------------------------------------------ the walkers

WALKER_CORE = "t2n.walk.core"
IR_READERS = ("t2n.walk.walker", "t2n.walk.fx_walker")
# what a reader may define again: the core's constructor and the hooks it asks readers for
READER_HOOKS = {"__init__", "_torch_values", "_complete", "_argument", "_in_place",
                "_after_fold", "_after_mapping"}


def _definitions(mod: str) -> set[str]:
    """The names ``mod`` defines: functions and methods at any depth, classes, and
    module-level assignments."""
    tree = ast.parse(open(MODULES[mod], encoding="utf-8").read(), MODULES[mod])
    names = {n.name for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for n in tree.body:
        targets = n.targets if isinstance(n, ast.Assign) else \
            [n.target] if isinstance(n, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_one_walker_core():
    """Folding, conforming, error recording and tensor arguments exist once, in the core;
    the IR readers (TorchScript, FX) only translate their nodes for it."""
    core = _definitions(WALKER_CORE)
    assert {"_record", "_foldable", "_fold", "_conform", "_tensor_arg", "_resolve",
            "conform", "_pruned_label", "_NON_DETERMINISTIC"} <= core
    again = {mod: sorted((_definitions(mod) & core) - READER_HOOKS) for mod in IR_READERS}
    assert not any(again.values()), f"defined again outside {WALKER_CORE}: {again}"
    for mod in IR_READERS:
        assert WALKER_CORE in GRAPH[mod], f"{mod} does not build on {WALKER_CORE}"


def test_export_picks_a_capture_strategy_without_naming_it():
    """t2n/api.py compares no value with a capture kind: the capture strategy table
    (t2n/capture/strategies.py) maps the kind to what captures and walks."""
    tree = ast.parse(open(MODULES["t2n.api"], encoding="utf-8").read())
    kinds = {"trace", "export", "torchscript"}
    named = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Compare)
             and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in n.ops)
             and any(isinstance(c, ast.Constant) and c.value in kinds
                     for c in [n.left, *n.comparators])]
    assert not named, f"t2n/api.py compares with a capture kind on lines {named}"
