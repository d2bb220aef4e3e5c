"""Deliberately wrong variants of a reference solution, for the gate's mutation check.

A code item's tests (visible and hidden) must tell the reference from a near miss: each mutant below
has to fail at least one of them, else the gate reports it as a survivor. Mutants change only the
reference function itself (helpers and module constants are left alone):

- ``drop factor 2``: the first literal ``2`` (or ``2.0``) becomes 1; with no such literal, the
  returned value is doubled instead (numbers only: ``compare == "rel"``);
- ``swap arguments``: the first and last parameters trade places, and so do the last two;
- ``off by one``: the first other integer literal ``n`` (not 0, 1 or 2) becomes ``n + 1``; with none,
  the first ordering comparison loses or gains its equality (``<`` <-> ``<=``, ``>`` <-> ``>=``).
"""

from __future__ import annotations

import ast
import copy

_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise ValueError(f"no top-level function {name!r} in the reference source")


def _walk_in_order(node: ast.AST):
    """Nodes of ``node`` in source order (``ast.walk`` is breadth-first)."""
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _walk_in_order(child)


def mutants(source: str, function: str, compare: str) -> list[tuple[str, str]]:
    """(description, mutated module source) pairs for ``function`` in ``source``; ``compare`` is the
    item's compare mode. Raises ValueError when ``function`` is not defined at the top level."""
    tree = ast.parse(source)
    _function(tree, function)
    out: list[tuple[str, str]] = []

    def variant(description: str, edit) -> None:
        copy_tree = copy.deepcopy(tree)
        if edit(_function(copy_tree, function)) is not False:
            out.append((description, ast.unparse(ast.fix_missing_locations(copy_tree))))

    def drop_two(fn: ast.FunctionDef):
        for node in _walk_in_order(fn):
            if isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == 2:
                node.value = type(node.value)(1)
                return True
        if compare != "rel":
            return False
        for node in _walk_in_order(fn):
            if isinstance(node, ast.Return) and node.value is not None:
                node.value = ast.BinOp(left=ast.Constant(2), op=ast.Mult(), right=node.value)
        return True

    variant("drop factor 2", drop_two)
    params = [a.arg for a in _function(tree, function).args.args]
    pairs = []
    if len(params) >= 2:
        pairs.append((0, len(params) - 1))
    if len(params) >= 3:
        pairs.append((len(params) - 2, len(params) - 1))
    for i, j in pairs:
        def swap(fn: ast.FunctionDef, i=i, j=j):
            fn.args.args[i].arg, fn.args.args[j].arg = fn.args.args[j].arg, fn.args.args[i].arg
        variant(f"swap arguments {params[i]} and {params[j]}", swap)

    def off_by_one(fn: ast.FunctionDef):
        for node in _walk_in_order(fn):
            if isinstance(node, ast.Constant) and type(node.value) is int and node.value not in (0, 1, 2):
                node.value += 1
                return True
        for node in _walk_in_order(fn):
            if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIP:
                node.ops[0] = _FLIP[type(node.ops[0])]()
                return True
        return False

    variant("off by one", off_by_one)
    return out
