"""What a chapter notebook does when the recorded GPU runs are missing.

The recorded runs ship with the package, so this only happens with a broken or
stripped install. Then the chapter should still run everything it measures on
the reader's own devices, say once why the recorded plots are absent, and not
fail in every cell that reads the recording (and in every cell that uses a
name such a cell defined). `skip_cells_that_use` does that inside IPython (Jupyter,
JupyterLab, Colab, nbconvert, nbval): it drops, before they run, exactly the cells
that depend on the missing names.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any


def _top_level_stores(tree: ast.Module) -> set[str]:
    """Names a cell binds in the notebook's namespace (not the locals of its functions)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            return  # its body binds locals
        if isinstance(
            node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
        ):
            return  # their variables are their own
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _uses(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Every name a cell reads (inside its functions too) and every attribute it reads."""
    names, attributes = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            attributes.add(node.attr)
    return names, attributes


class SkipCellsThatUse(ast.NodeTransformer):
    """An IPython AST transformer: empties cells that read a missing name.

    A cell is skipped when it reads one of ``names`` or one of the names that an
    earlier skipped cell would have bound, or reads an attribute in ``attributes``
    (``measure.load_recorded`` of another machine). A cell that binds one of
    ``names`` itself (the setup cell, run again) always runs, and a name bound again
    by a cell that runs is no longer missing.
    """

    def __init__(self, names: Iterable[str], attributes: Iterable[str] = ()) -> None:
        self.roots = set(names)
        self.missing = set(names)
        self.attributes = set(attributes)

    def visit_Module(self, tree: ast.Module) -> ast.Module:  # noqa: N802 (ast's naming)
        stores = _top_level_stores(tree)
        names, attributes = _uses(tree)
        if stores & self.roots:
            self.missing -= stores - self.roots
            return tree
        if names & self.missing or attributes & self.attributes:
            self.missing |= stores
            return ast.Module(body=[], type_ignores=[])
        self.missing -= stores
        return tree


def skip_cells_that_use(
    names: Iterable[str], attributes: Iterable[str] = (), reason: object = ""
) -> SkipCellsThatUse | None:
    """From now on, skip the cells of this notebook that need ``names`` (see the class).

    Prints ``reason`` and what happens next, once. Outside IPython it only prints:
    there are no cells to skip.
    """
    names = list(names)
    print(
        f"{reason}\nThe cells that show these recorded runs (those that use "
        f"{', '.join(names)}) are skipped; everything measured on this machine still runs."
    )
    shell = _ipython()
    if shell is None:
        return None
    shell.ast_transformers[:] = [
        t for t in shell.ast_transformers if not isinstance(t, SkipCellsThatUse)
    ]
    transformer = SkipCellsThatUse(names, attributes)
    shell.ast_transformers.append(transformer)
    return transformer


def _ipython() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()
