"""The op enum and the registry: each op is named once (``opdef.Op``) and defined once
(``ir/ops/``); passes, analyses, backends and the frontend name ops only through ``Op``."""
from __future__ import annotations

import ast
from pathlib import Path

from fearless.ir.opdef import REGISTRY, Op, only, warp_collectives

SRC = Path(__file__).resolve().parents[2] / "src" / "fearless"
# where op names are spelled out: the enum itself
DEFINITIONS = {SRC / "ir" / "opdef.py"}


def test_every_op_of_the_enum_is_defined_and_every_definition_is_in_the_enum():
    assert set(REGISTRY) == set(Op)
    assert all(type(name) is Op and d.name is name for name, d in REGISTRY.items())


def test_members_are_named_by_the_op_and_outside_arith_and_math_by_its_dialect_too():
    for op in Op:
        plain = op.base.upper()
        want = plain if op.dialect in ("arith", "math") else f"{op.dialect}_{plain}".upper()
        assert op.name == want, op
        assert op == op.value and f"{op}" == op.value  # the IR text is the name


def _literals(path: Path):
    """(line, text) of each string constant in ``path`` that names an op, or a dialect with its
    dot ("arith."), as a prefix test or an f-string that builds a name would."""
    names = {op.value for op in Op}
    prefixes = {f"{op.dialect}." for op in Op}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                (node.value in names or node.value in prefixes):
            yield node.lineno, node.value


def test_no_op_name_is_a_string_literal_outside_the_enum():
    found = [f"{path.relative_to(SRC.parent)}:{line}: {text!r}"
             for path in sorted(SRC.rglob("*.py")) if path not in DEFINITIONS
             for line, text in _literals(path)]
    assert not found, "name ops by their Op member:\n" + "\n".join(found)


def test_the_scan_finds_literals_and_prefixes(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('if op.name == "arith.add" or op.name.startswith("warp."):\n'
                    '    x = f"math.{fn}"\n'
                    'doc = "arith.add is an op"  # prose: not a name\n')
    assert list(_literals(path)) == [(1, "arith.add"), (1, "warp."), (2, "math.")]


def test_the_derived_lists_come_from_the_traits():
    assert warp_collectives() == {Op.WARP_SHUFFLE, Op.WARP_VOTE, Op.WARP_REDUCE, Op.WARP_MMA,
                                  Op.WARP_LDMATRIX}
    assert not set(only("simt")) & set(only("tile"))


def _hand_typed(path: Path):
    """(line, op) of each ``*.create(Op.X, operands, result_types ...)`` in ``path`` whose op
    has a result rule, which would compute those types."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "create" and node.args
                and isinstance(node.args[0], ast.Attribute)
                and isinstance(node.args[0].value, ast.Name) and node.args[0].value.id == "Op"):
            continue
        op = Op[node.args[0].attr]
        given = len(node.args) >= 3 or any(k.arg == "result_types" for k in node.keywords)
        if given and REGISTRY[op].result is not None:
            yield node.lineno, op


def test_no_result_types_are_given_where_the_ops_rule_computes_them():
    found = [f"{path.relative_to(SRC.parent)}:{line}: {op}"
             for path in sorted(SRC.rglob("*.py")) for line, op in _hand_typed(path)]
    assert not found, "leave the result types to the op's rule:\n" + "\n".join(found)


def test_the_result_type_scan_finds_hand_typed_ops(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("b.create(Op.ADD, [x, y], [t])\nb.create(Op.CAST, [x], [t])\n"
                    "b.create(Op.NEG, [x], result_types=[t])\nb.create(Op.NEG, [x])\n")
    assert list(_hand_typed(path)) == [(1, Op.ADD), (3, Op.NEG)]
