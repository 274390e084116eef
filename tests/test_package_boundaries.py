"""The packages import one another in one direction only. Between the top-level packages:
no cycle; edges and workers never reach the plugin, the CLI or Hermes; the plugin never
reaches the CLI. Inside the plugin: its sub-packages follow the direction stated in
``docs/architecture.md``, whose package map (a Mermaid graph and a table) is generated
from the imports here.

Run ``python tests/test_package_boundaries.py --write`` to rewrite the map in the doc.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("canonical", "edge", "workers", "gateway_plugin", "hdgctl", "scripted_model")


def _hermes_top_level() -> tuple[str, ...]:
    names = {"gateway", "hermes_cli", "hermes_state", "hermes_constants", "tools", "agent", "cron"}
    listed = importlib.metadata.distribution("hermes-agent").read_text("top_level.txt") or ""
    return tuple(sorted(names | set(listed.split())))


HERMES = _hermes_top_level()


@dataclass(frozen=True)
class Import:
    """One imported module (resolved: ``from a.b import c`` names ``a.b.c`` when that is
    a module, else ``a.b`` with ``names=("c",)``)."""

    importer: str  # dotted name of the importing module
    module: str
    names: tuple[str, ...]
    type_only: bool  # inside ``if TYPE_CHECKING:``


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            for statement in node.body:
                inside |= {id(child) for child in ast.walk(statement)}
    return inside


def imports_of(path: Path) -> Iterator[Import]:
    """Every import in the file: at module level, in functions, under TYPE_CHECKING."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    importer = module_name(path)
    type_only = _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer, alias.name, (), id(node) in type_only)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                package = importer.split(".")
                if path.name != "__init__.py":
                    package = package[:-1]
                package = package[: len(package) - (node.level - 1)]
                module = ".".join([*package, module] if module else package)
            plain = [a.name for a in node.names if not is_module(f"{module}.{a.name}")]
            if plain:
                yield Import(importer, module, tuple(plain), id(node) in type_only)
            for alias in node.names:
                if is_module(f"{module}.{alias.name}"):
                    yield Import(importer, f"{module}.{alias.name}", (), id(node) in type_only)


def package_imports(package: str) -> list[Import]:
    return [i for path in sorted((ROOT / package).rglob("*.py")) for i in imports_of(path)]


def imported_modules(package: str) -> dict[str, set[str]]:
    """For each top-level module name ``package`` imports (anywhere, even inside a
    function or under TYPE_CHECKING): the modules that do."""
    found: dict[str, set[str]] = {}
    for imp in package_imports(package):
        found.setdefault(imp.module.split(".")[0], set()).add(imp.importer)
    return found


GRAPH = {package: imported_modules(package) for package in PACKAGES}


def edges(package: str) -> set[str]:
    return {other for other in GRAPH[package] if other in PACKAGES and other != package}


def test_the_packages_import_one_another_without_a_cycle() -> None:
    def cycle_from(start: str, path: list[str]) -> list[str] | None:
        for nxt in sorted(edges(path[-1])):
            if nxt == start:
                return [*path, nxt]
            if nxt not in path:
                found = cycle_from(start, [*path, nxt])
                if found:
                    return found
        return None

    for package in PACKAGES:
        assert cycle_from(package, [package]) is None, " -> ".join(
            cycle_from(package, [package]) or []
        )


def test_the_plugin_never_imports_the_cli() -> None:
    # embedded mode runs an edge and in-process workers; the CLI builds on the plugin
    assert edges("gateway_plugin") <= {"canonical", "edge", "workers"}
    assert "hdgctl" not in GRAPH["gateway_plugin"], GRAPH["gateway_plugin"].get("hdgctl")


def test_edges_and_workers_never_import_the_plugin_the_cli_or_hermes() -> None:
    for package in ("edge", "workers"):
        for forbidden in ("gateway_plugin", "hdgctl", *HERMES):
            assert forbidden not in GRAPH[package], (package, GRAPH[package].get(forbidden))


def test_the_contract_imports_none_of_the_processes() -> None:
    assert edges("canonical") == set()


def test_hermes_is_imported_only_by_the_plugins_seam() -> None:
    importers = {path for name in HERMES for path in GRAPH["gateway_plugin"].get(name, set())}
    assert importers and all(path.startswith("gateway_plugin.hermes.") for path in importers), (
        importers
    )
    for package in PACKAGES:
        if package != "gateway_plugin":
            assert not set(GRAPH[package]) & set(HERMES), package


# -- inside the plugin: groups, direction, the map in the doc

PLUGIN = ROOT / "gateway_plugin"
DOC = ROOT / "docs" / "architecture.md"
SECTION = "## The plugin's package map"
SUBPACKAGES = tuple(sorted(p.name for p in PLUGIN.iterdir() if (p / "__init__.py").is_file()))
# Top-level modules that import nothing of the plugin: every sub-package may use them.
BASE = ("errors", "ports", "shutdown")
# Hermes' state.db, read-only: the only modules of the seam imported from below it.
STATE_DB_READERS = ("gateway_plugin.hermes.state_db", "gateway_plugin.hermes.transcript")
# The controller's own types, named in annotations only (a handler takes the controller).
ANNOTATION_TYPES = {
    "gateway_plugin.controller": {"Controller"},
    "gateway_plugin.jobs": {"JobQueue"},
}
OUTSIDE_IMPORTERS = ("hdgctl", "bench")  # besides the plugin, what uses its surface
UNWRITTEN = "?"  # the "owns" cell of a group with no row yet


def group_of(module: str) -> str | None:
    """The group of a dotted module name: a sub-package, ``core`` (the plugin's other
    top-level modules: controller, jobs, upkeep, ...), ``base``, ``canonical``, or None
    (not ours). The package itself, whose ``register()`` Hermes calls, is Hermes' way in."""
    parts = module.split(".")
    if parts[0] == "canonical":
        return "canonical"
    if parts[0] != "gateway_plugin":
        return None
    if len(parts) == 1:
        return "hermes"  # ``register()``, the entry point Hermes calls
    if parts[1] in SUBPACKAGES:
        return parts[1]
    return "base" if parts[1] in BASE else "core"


PLUGIN_IMPORTS = package_imports("gateway_plugin")
PLUGIN_GROUPS = {module_name(path): group_of(module_name(path)) for path in PLUGIN.rglob("*.py")}
GROUPS = (*SUBPACKAGES, "core", "base")


def cross_imports(*, type_only: bool) -> list[tuple[str, str, Import]]:
    """(from group, to group, import) for imports between groups."""
    found = []
    for imp in PLUGIN_IMPORTS:
        source, target = PLUGIN_GROUPS[imp.importer], group_of(imp.module)
        if target is not None and target != source and imp.type_only == type_only:
            assert source is not None
            found.append((source, target, imp))
    return found


def section_text() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"{DOC.name} has no section {SECTION!r}"
    rest = text.split(SECTION, 1)[1]
    return rest.split("\n## ", 1)[0]


def stated_layers() -> list[tuple[str, ...]]:
    """The direction list of the doc's section: ``1. `core`, `jobs`: ...`` lines."""
    layers = []
    for line in section_text().splitlines():
        match = re.match(r"^\d+\. ((?:`[a-z_]+`(?:, | and )?)+)", line)
        if match:
            layers.append(tuple(re.findall(r"`([a-z_]+)`", match.group(1))))
    return layers


def rank() -> dict[str, int]:
    return {group: n for n, layer in enumerate(stated_layers()) for group in layer}


def is_state_db_read(target: str, imp: Import) -> bool:
    return target == "hermes" and imp.module in STATE_DB_READERS


def mermaid() -> str:
    runtime: dict[tuple[str, str], bool] = {}  # edge -> only reads of state.db
    for source, target, imp in cross_imports(type_only=False):
        key = (source, target)
        runtime[key] = runtime.get(key, True) and is_state_db_read(target, imp)
    order = {group: n for n, group in enumerate(g for layer in stated_layers() for g in layer)}
    tops = sorted(m.rsplit(".", 1)[-1] for m, g in PLUGIN_GROUPS.items() if g == "core")
    labels = {
        "core": f"core: {', '.join(tops)}",
        "base": f"base: {', '.join(BASE)}",
    }
    lines = ["graph TD"]
    for group in sorted((*GROUPS, "canonical"), key=lambda g: (order.get(g, 99), g)):
        lines.append(f'    {group}["{labels.get(group, group)}"]')
    for (source, target), reads in sorted(
        runtime.items(), key=lambda e: (order.get(e[0][0], 99), order.get(e[0][1], 99), e[0])
    ):
        arrow = "-. state.db .->" if reads else "-->"
        lines.append(f"    {source} {arrow} {target}")
    return "\n".join(lines)


def surface() -> dict[str, list[str]]:
    """What is used of each group from outside it: ``module.Name`` or a whole module."""
    used: dict[str, set[str]] = {group: set() for group in GROUPS}
    imports = [*PLUGIN_IMPORTS, *(i for p in OUTSIDE_IMPORTERS for i in package_imports(p))]
    for imp in imports:
        target = group_of(imp.module)
        if target not in used or PLUGIN_GROUPS.get(imp.importer) == target:
            continue
        local = imp.module.removeprefix("gateway_plugin").removeprefix(".")
        local = local.removeprefix(f"{target}.") if target in SUBPACKAGES else local
        for name in imp.names or ("",):
            used[target].add(f"{local}.{name}" if name else local or "gateway_plugin")
    return {group: sorted(names) for group, names in used.items()}


MAP_BEGIN, MAP_END = "<!-- package-map:begin -->", "<!-- package-map:end -->"
TABLE_BEGIN, TABLE_END = "<!-- package-table:begin -->", "<!-- package-table:end -->"


def between(text: str, begin: str, end: str) -> str:
    assert begin in text and end in text, f"{DOC.name} lacks the markers {begin} ... {end}"
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def stated_owns() -> dict[str, str]:
    owns = {}
    for line in between(section_text(), TABLE_BEGIN, TABLE_END).splitlines():
        match = re.match(r"^\| `([a-z_]+)` \| (.*?) \|", line)
        if match:
            owns[match.group(1)] = match.group(2).strip()
    return owns


def table(owns: dict[str, str]) -> str:
    rows = ["| group | owns | used from outside it |", "|---|---|---|"]
    order = {group: n for n, group in enumerate(g for layer in stated_layers() for g in layer)}
    for group, names in sorted(surface().items(), key=lambda i: (order.get(i[0], 99), i[0])):
        used = ", ".join(f"`{n}`" for n in names) or "nothing"
        rows.append(f"| `{group}` | {owns.get(group) or UNWRITTEN} | {used} |")
    return "\n".join(rows)


def generated_blocks() -> tuple[str, str]:
    return f"```mermaid\n{mermaid()}\n```", table(stated_owns())


def write() -> None:
    text = DOC.read_text(encoding="utf-8")
    graph, rows = generated_blocks()
    for (begin, end), block in (((MAP_BEGIN, MAP_END), graph), ((TABLE_BEGIN, TABLE_END), rows)):
        between(text, begin, end)
        head, rest = text.split(begin, 1)
        text = f"{head}{begin}\n{block}\n{end}{rest.split(end, 1)[1]}"
    DOC.write_text(text, encoding="utf-8")


REWRITE = "run `python tests/test_package_boundaries.py --write` and commit docs/architecture.md"


def test_the_package_map_in_the_doc_is_the_one_the_imports_draw() -> None:
    graph, rows = generated_blocks()
    assert between(section_text(), MAP_BEGIN, MAP_END) == graph, REWRITE
    assert between(section_text(), TABLE_BEGIN, TABLE_END) == rows, REWRITE


def test_every_group_of_the_plugin_has_a_row_saying_what_it_owns() -> None:
    owns = stated_owns()
    assert set(owns) == set(GROUPS), (sorted(owns), GROUPS)
    assert all(text and text != UNWRITTEN for text in owns.values()), owns


def test_the_doc_states_one_layer_for_every_group() -> None:
    stated = [group for layer in stated_layers() for group in layer]
    assert sorted(stated) == sorted((*GROUPS, "canonical")), stated
    assert stated[-1] == "canonical"


def test_imports_between_groups_point_down_the_stated_layers() -> None:
    ranks = rank()
    upward = [
        f"{imp.importer} -> {imp.module}"
        for source, target, imp in cross_imports(type_only=False)
        if ranks[source] >= ranks[target] and not is_state_db_read(target, imp)
    ]
    assert not upward, upward


def test_type_only_imports_point_back_up_only_for_the_controllers_own_types() -> None:
    ranks = rank()
    upward = [
        f"{imp.importer} -> {imp.module} {imp.names}"
        for source, target, imp in cross_imports(type_only=True)
        if ranks[source] > ranks[target]
        and not (imp.names and set(imp.names) <= ANNOTATION_TYPES.get(imp.module, set()))
    ]
    assert not upward, upward


def test_the_state_db_readers_and_base_import_nothing_above_them() -> None:
    allowed = {*STATE_DB_READERS, "gateway_plugin.hermes.contract"}
    allowed |= {f"gateway_plugin.{name}" for name in BASE}
    reached, todo = set(), [*STATE_DB_READERS, *sorted(allowed - set(STATE_DB_READERS))]
    while todo:
        module = todo.pop()
        reached.add(module)
        for imp in PLUGIN_IMPORTS:
            if imp.importer == module and imp.module.startswith("gateway_plugin"):
                if imp.module not in reached:
                    todo.append(imp.module)
    assert reached <= allowed, sorted(reached - allowed)


def test_the_doc_names_the_exceptions_to_the_direction() -> None:
    text = section_text()
    for module in STATE_DB_READERS:
        assert f"`{module.removeprefix('gateway_plugin.').replace('.', '/')}.py`" in text, module
    for names in ANNOTATION_TYPES.values():
        assert all(f"`{name}`" in text for name in names), names


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_package_boundaries.py --write")
    write()
    print(f"rewrote the package map in {DOC.relative_to(ROOT)}")
