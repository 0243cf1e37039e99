"""AST -> IR: one ``visit_*`` per supported Python node; anything else is a CompileError.

Variables: a name bound once to a compile-time value (a constant, an array parameter, a module,
a function) is kept as that value. Other locals live in typed slots (``local.*`` ops), whose
types the typing stage (``typing.py``) computes before emission: the join (``infer.join``) of
every type assigned to the name over the whole function, so ``acc = 0`` followed by
``acc += x[i]`` (f32) makes ``acc`` an f32. The typing stage runs these same visitors in typing
mode (``GenContext.typing``: the IR is thrown away, a read of a slot makes no op); emission then
runs once, with the types known. Device functions (``@fearless.func``) are inlined at each call,
with their own slots (``funcs.py`` binds the arguments).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

from fearless.errors import CompileError, InternalError
from fearless.frontend import funcs, intrinsics
from fearless.frontend.capture import MISSING, Captured
from fearless.frontend.emit import Emitter, describe
from fearless.frontend.infer import (WEAK_FLOAT, Const, Static, TupleValue, TypingError, join,
                                     weak_marker)
from fearless.frontend.spans import CallSite, Span
from fearless.ir import types as T
from fearless.ir.core import Builder, Function, Param, Region, Value
from fearless.ir.opdef import Op
from fearless.simt.static import static_range

_BINOPS = {ast.Add: Op.ADD, ast.Sub: Op.SUB, ast.Mult: Op.MUL, ast.Div: Op.DIV,
           ast.FloorDiv: Op.FLOORDIV, ast.Mod: Op.MOD, ast.Pow: Op.POW, ast.BitAnd: Op.AND,
           ast.BitOr: Op.OR, ast.BitXor: Op.XOR, ast.LShift: Op.SHL, ast.RShift: Op.SHR}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt",
           ast.GtE: "ge"}
_PARAMS = (T.Array, T.TensorView)  # bound once, never stored in a variable


@dataclass
class Slot:
    key: str


@dataclass
class TupleSlot:
    items: list
    read: object = None  # typing rounds: (epoch, the TupleValue reads give)


@dataclass
class Bound:
    value: object


@dataclass(frozen=True)
class Dialect:
    """What differs between the SIMT and tile languages: typing of values, attributes, calls."""

    emitter: type = Emitter
    attribute: object = intrinsics.attribute
    call: object = intrinsics.call
    supported: str = ("kernels support numbers, arrays, if/for/while, calls of @fearless.func "
                      "functions and the math module")


SIMT = Dialect()


@dataclass
class GenContext:
    """State shared by the kernel and every function inlined into it, for one walk of the
    kernel: a round of the typing stage (``typing``) or the emission."""

    kernel: str
    var_types: dict                                      # slot key -> type (emission: final)
    builder: Builder
    entry: list = field(default_factory=list)            # local.alloc ops, hoisted to entry
    slots: dict = field(default_factory=dict)            # key -> ref Value
    observed: dict = field(default_factory=dict)         # key -> [(type or weak marker, span)]
    declared: dict = field(default_factory=dict)         # key -> type from `x: f32 = ...`
    # typing: a round of the typing stage, whose IR is thrown away. An assignment it cannot
    # convert to its slot's guessed type is noted in `deferred` and left out, so that the round
    # goes on and learns every variable's assignments (emission raises it); a read of a slot
    # makes no op (`loaded`: one Value per slot and type; `epoch` counts the assignments, which
    # may change what a read sees); names bound once are listed in `bound`
    typing: bool = False
    deferred: bool = False
    reads: set = field(default_factory=set)              # typing: (key, type a read saw)
    loaded: dict = field(default_factory=dict)           # typing: key -> the Value reads give
    guesses: dict = field(default_factory=dict)          # typing: key -> (assignments, join)
    epoch: int = 0
    bound: list = field(default_factory=list)            # typing: (prefix, name, value,
    #                                                      span, is a parameter)
    scopes: dict = field(default_factory=dict)           # typing: prefix -> (cap, call chain)
    inline_count: int = 0
    call_stack: list = field(default_factory=list)
    dialect: Dialect = SIMT
    block_index: dict = field(default_factory=dict)      # tile kernels: axis -> this block's
    #                                                      coordinate, made once, at entry

    def slot(self, key: str, first) -> Value:
        ref = self.slots.get(key)
        if ref is None:
            elem = self.declared.get(key) or self.var_types.get(key) or join([first])
            op_region = Region()
            with self.builder.at(op_region):
                ref = self.builder.create(Op.LOCAL_ALLOC, [], [T.LocalRef(elem)]).result
            self.entry.extend(op_region.ops)
            self.slots[key] = ref
        return ref

    def read_type(self, key: str, elem):
        """The type a typing round's read of ``key`` sees: its slot's ``elem``, or in a round
        that guesses the slot (no earlier round typed it), the join of what was assigned to it
        so far in the source. The slot's first assignment alone made a helper's value the type
        of its first return, and a guess an assignment from the variable itself can keep (seed
        29474: ``v /= n`` computed as an integer division, f64, kept an f16 variable f64)."""
        if key in self.var_types or key in self.declared or not isinstance(elem, T.Scalar):
            return elem
        seen = self.observed.get(key, ())
        count, guess = self.guesses.get(key, (None, None))
        if count != len(seen):
            try:
                guess = join([t for t, _ in seen] or [elem])
            except TypingError:
                guess = elem
            guess = guess if isinstance(guess, T.Scalar) else elem
            self.guesses[key] = (len(seen), guess)
        return guess


def _type_or_marker(fv):
    if isinstance(fv, Const):
        return weak_marker(fv) if fv.weak else T.Scalar(fv.dtype)
    return fv.type


def _shape(binding):
    if isinstance(binding, TupleSlot):
        return tuple(_shape(b) for b in binding.items)
    return None


def _is_static(fv) -> bool:
    if isinstance(fv, TupleValue):
        return all(_is_static(x) for x in fv.items)
    return isinstance(fv, (Const, Static)) or (isinstance(fv, Value)
                                                and isinstance(fv.type, _PARAMS))


class FunctionGen(ast.NodeVisitor):
    """Generates IR for one function body (the kernel, or one inlined call of a device function)."""

    def __init__(self, ctx: GenContext, cap: Captured, prefix: str = "", ret_key: str | None = None,
                 inlined: tuple[CallSite, ...] = ()):
        self.ctx, self.cap, self.prefix, self.ret_key = ctx, cap, prefix, ret_key
        self.inlined = inlined  # the calls that inlined this function, innermost first
        self.b = ctx.builder
        if ctx.typing:
            ctx.scopes.setdefault(prefix, (cap, inlined))
        self.emit = ctx.dialect.emitter(self.b)
        self.env: dict[str, object] = {}
        self.depth = 0  # regions (if/for/while bodies) around the statement being generated
        self.returned = None  # the binding of the return slot(s), once a return has a value
        self.unsafe_depth = 0  # `with fl.unsafe():` blocks around the statement (not inherited
        #                        by inlined functions, as Rust's unsafe blocks are not)

    # diagnostics ----------------------------------------------------------------------------

    def span(self, node) -> Span:
        """The span of ``node``, with the chain of calls that inlined this function."""
        span = self.cap.span(node)
        return replace(span, inlined=self.inlined) if self.inlined else span

    def error(self, node, message, help=None, cls=CompileError):
        return cls(message, kernel=self.ctx.kernel, span=self.span(node), help=help)

    def truth(self, node):
        """The truth value of expression ``node``; an error points at the expression."""
        value = self.visit(node)
        try:
            return self.emit.truth(value)
        except TypingError as exc:
            raise self.error(node, str(exc), exc.help) from None

    def visit(self, node):
        saved = self.b.span
        if not self.ctx.typing:  # a typing round's ops are thrown away: no span to give them
            self.b.span = self.span(node)
        try:
            return super().visit(node)
        except TypingError as exc:
            raise self.error(node, str(exc), exc.help) from None
        finally:
            self.b.span = saved

    def describe_self(self) -> str:
        """``kernel 'k'`` or ``device function 'f'`` (in call chains)."""
        if self.inlined:
            return f"device function '{self.cap.name}'"
        return f"kernel '{self.ctx.kernel}'"

    def generic_visit(self, node):
        raise self.error(node, f"{type(node).__name__} is not supported in kernels",
                         help=self.ctx.dialect.supported)

    # statements -----------------------------------------------------------------------------

    def body(self, stmts) -> bool:
        """Visit statements in order; stop after one that leaves the region. True if one did."""
        for stmt in stmts:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str):
                continue  # a docstring
            if self.visit(stmt):
                return True
        return False

    def visit_Pass(self, node):
        return False

    def visit_Expr(self, node):
        self.visit(node.value)
        return False

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self.assign(target, value, node)
        return False

    def visit_AnnAssign(self, node):
        if not isinstance(node.target, ast.Name) or node.value is None:
            raise self.error(node, "annotated assignments need a plain name and a value")
        ann = self.visit(node.annotation)
        dtype = intrinsics.as_dtype(ann)
        if dtype is None:
            raise self.error(node.annotation, f"{describe(ann)} is not a dtype")
        self.ctx.declared[self.prefix + node.target.id] = T.Scalar(dtype)
        self.assign_slot(node.target.id, self.visit(node.value), node)
        return False

    def visit_AugAssign(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported")
        target = node.target
        if isinstance(target, ast.Subscript):
            array = self.visit(target.value)
            indices = self.visit_indices(target.slice)
            current = self.load(array, indices, target, rmw=True)
            self.store(array, indices, self.emit.binary(op, current, self.visit(node.value)),
                       target, rmw=True)
            return False
        if not isinstance(target, ast.Name):
            raise self.error(target, "augmented assignment needs a name or an array element")
        self.assign(target, self.emit.binary(op, self.read_name(target), self.visit(node.value)),
                    node)
        return False

    def visit_With(self, node):
        item = node.items[0] if len(node.items) == 1 else None
        ok = item is not None and item.optional_vars is None and isinstance(
            item.context_expr, ast.Call) and not item.context_expr.args \
            and not item.context_expr.keywords and self.is_static(item.context_expr.func,
                                                                  intrinsics.safety.unsafe)
        if not ok:
            raise self.error(node, "kernels support only `with fl.unsafe():`")
        self.unsafe_depth += 1
        try:
            return self.body(node.body)
        finally:
            self.unsafe_depth -= 1

    def visit_If(self, node):
        cond = self.truth(node.test)
        if isinstance(cond, Const):  # decided at compile time: only one branch exists
            return self.body(node.body if cond.value else node.orelse)
        then, other = Region(), Region()
        self.b.create(Op.SCF_IF, [cond], regions=[then, other])
        with self.b.at(then):
            left = self.nested(node.body)
        with self.b.at(other):
            right = self.nested(node.orelse)
        return left and right

    def nested(self, stmts) -> bool:
        self.depth += 1
        try:
            return self.body(stmts)
        finally:
            self.depth -= 1  # both branches left: the statements after are unreachable

    def visit_For(self, node):
        if node.orelse:
            raise self.error(node, "for ... else is not supported")
        it = node.iter
        if isinstance(it, ast.Call) and self.is_static(it.func, static_range):
            return self.static_for(node)
        if not (isinstance(it, ast.Call) and self.is_static(it.func, range)):
            raise self.error(it, "kernels loop only over range(...)")
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise self.error(it, "range() takes 1 to 3 positional arguments")
        args = [self.visit(a) for a in it.args]
        for a, n in zip(args, it.args):
            d = self.emit.dtype_of(a)
            if d == WEAK_FLOAT or (not isinstance(d, str) and not (d.is_int or d.is_bool)):
                raise self.error(n, "range() needs integers")
        start, stop, step = {1: (Const(0), args[0], Const(1)), 2: (*args, Const(1))}.get(
            len(args), args)
        nodes = {1: (it, it.args[0], it), 2: (*it.args, it)}.get(len(args), it.args)
        sign = 0
        if isinstance(step, Const):
            if step.value == 0:
                raise self.error(it.args[2], "range() step must not be zero")
            sign = 1 if step.value > 0 else -1
        bounds = [self.emit.scalar(v, T.INDEX.dtype) for v in (start, stop, step)]
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "the loop variable must be a plain name")
        body = Region([Value(T.INDEX, node.target.id)])
        spans = tuple(self.span(n) for n in nodes)  # for diagnostics about the loop's bounds
        self.b.create(Op.SCF_FOR, bounds, attrs={"step_sign": sign, "bound_spans": spans},
                      regions=[body])
        with self.b.at(body):
            self.assign_slot(node.target.id, body.args[0], node.target)
            self.nested(node.body)
        return False

    def static_for(self, node):
        """``for i in fl.static_range(...)``: the body once per value, i a constant."""
        it = node.iter
        bounds = [self.visit(a) for a in it.args]
        if it.keywords or not 1 <= len(bounds) <= 3 or not all(
                isinstance(v, Const) and isinstance(v.value, int) for v in bounds):
            raise self.error(it, "fl.static_range() takes 1 to 3 constant ints")
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "the loop variable must be a plain name")
        for n in (n for stmt in node.body for n in ast.walk(stmt)):
            if isinstance(n, (ast.Break, ast.Continue, ast.Return)):
                raise self.error(n, "a loop over fl.static_range() is unrolled at compile "
                                    "time and cannot break, continue or return",
                                 help="use range() for a real loop")
        name = node.target.id
        saved = self.env.get(name)
        for i in range(*(v.value for v in bounds)):
            self.env[name] = Bound(Const(i))
            self.body(node.body)
        if saved is None:
            self.env.pop(name, None)
        else:
            self.env[name] = saved
        return False

    def visit_While(self, node):
        if node.orelse:
            raise self.error(node, "while ... else is not supported")
        cond, body = Region(), Region()
        self.b.create(Op.SCF_WHILE, [], regions=[cond, body])
        with self.b.at(cond):
            test = self.truth(node.test)
            if isinstance(test, Const):
                test = self.emit.constant(test.value, T.BOOL.dtype)
            self.b.create(Op.SCF_CONDITION, [test])
        with self.b.at(body):
            self.nested(node.body)
        return False

    def visit_Break(self, node):
        self.b.create(Op.CF_BREAK, [])
        return True

    def visit_Continue(self, node):
        self.b.create(Op.CF_CONTINUE, [])
        return True

    def visit_Return(self, node):
        if self.ret_key is None:  # the kernel itself
            if node.value is not None and not (isinstance(node.value, ast.Constant)
                                               and node.value.value is None):
                raise self.error(node.value, "a kernel returns nothing",
                                 help="write results into a fl.DisjointSlice parameter")
        elif node.value is not None:
            binding = self.bind(self.ret_key, self.visit(node.value), node, is_return=True)
            if self.returned is not None and _shape(binding) != _shape(self.returned):
                raise self.error(node, "this return gives a value of another shape than an "
                                       "earlier return")
            self.returned = binding
        self.b.create(Op.CF_RETURN, [])
        return True

    # assignment -----------------------------------------------------------------------------

    def assign(self, target, value, node):
        if isinstance(target, ast.Name):
            self.assign_name(target.id, value, node)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, TupleValue) or len(value.items) != len(target.elts):
                raise self.error(node, f"cannot unpack {describe(value)} into "
                                       f"{len(target.elts)} names")
            for t, v in zip(target.elts, value.items):
                self.assign(t, v, node)
        elif isinstance(target, ast.Subscript):
            array = self.visit(target.value)
            self.store(array, self.visit_indices(target.slice), value, target)
        else:
            raise self.error(target, f"cannot assign to {type(target).__name__}")

    def assign_name(self, name: str, value, node):
        once = self.cap.assign_counts[name] == 1
        if isinstance(value, Value) and isinstance(value.type, T.Array) and not value.hint:
            value.hint = name  # names a shared array in diagnostics
        if once and (_is_static(value) or (self.depth == 0 and isinstance(value, Value))):
            # a constant, or a value assigned once in the function's own region, which
            # dominates every later use: no slot needed
            self.bind_once(name, value, node)
            return
        if _is_static(value) and not isinstance(value, (Const, TupleValue)):
            raise self.error(node, f"'{name}' refers to {describe(value)} and is assigned more "
                                   f"than once", help="give each array or function its own name")
        self.assign_slot(name, value, node)

    def bind_param(self, name: str, value, node):
        """Bind parameter ``name``: a slot when the body assigns it, else the value itself."""
        if self.cap.assign_counts[name] > 1:
            self.assign_slot(name, value, node)
        else:
            self.bind_once(name, value, node, param=True)

    def bind_once(self, name: str, value, node, param=False):
        self.env[name] = Bound(value)
        if self.ctx.typing:
            self.ctx.bound.append((self.prefix, name, value, self.span(node), param))

    def assign_slot(self, name: str, value, node):
        self.env[name] = self.bind(self.prefix + name, value, node)

    def bind(self, key: str, value, node, is_return=False):
        """Store ``value`` into the slot(s) named ``key``; return the env binding."""
        span = self.span(node)
        if isinstance(value, TupleValue):
            return TupleSlot([self.bind(f"{key}[{i}]", v, node, is_return)
                              for i, v in enumerate(value.items)])
        if not isinstance(value, (Const, Value)) or (isinstance(value, Value)
                                                     and isinstance(value.type, _PARAMS)):
            raise self.error(node, f"cannot {'return' if is_return else 'store'} "
                                   f"{describe(value)} in a variable here",
                             help="bind arrays and functions once, at one place")
        observed = _type_or_marker(value)
        self.ctx.observed.setdefault(key, []).append((observed, span))
        self.ctx.epoch += 1
        if not self.ctx.typing and key not in self.ctx.var_types and key not in self.ctx.declared:
            raise InternalError(f"the typing stage gave no type to variable '{key}'")
        ref = self.ctx.slot(key, observed)
        name = key.rsplit(".", 1)[-1]
        try:
            stored = self.emit.implicit(value, ref.type.elem, f"variable '{name}'")
        except TypingError:
            if key in self.ctx.declared or not self.ctx.typing:
                raise
            # the slot's type is a guess that this observation will widen, and this round's IR
            # is thrown away: leave the store out rather than stop the round (stopping took one
            # round per inlined call site: fuzz seed 4961)
            self.ctx.deferred = True
            return Slot(key)
        self.b.create(Op.LOCAL_STORE, [ref, stored])
        return Slot(key)

    def read_binding(self, binding):
        if isinstance(binding, Bound):
            return binding.value
        if isinstance(binding, TupleSlot):
            if binding.read is not None and binding.read[0] == self.ctx.epoch:
                return binding.read[1]
            value = TupleValue(tuple(self.read_binding(b) for b in binding.items))
            if self.ctx.typing:
                binding.read = (self.ctx.epoch, value)
            return value
        ref = self.ctx.slots[binding.key]
        if self.ctx.typing:  # only the type matters: reads of `acc` in `acc[i][j]` load every
            # element of the tuple, most of the IR of a register-blocked GEMM
            seen = self.ctx.read_type(binding.key, ref.type.elem)
            self.ctx.reads.add((binding.key, seen))
            value = self.ctx.loaded.get(binding.key)
            if value is None or value.type != seen:
                value = self.ctx.loaded[binding.key] = Value(seen)
            return value
        return self.b.create(Op.LOCAL_LOAD, [ref]).result

    # expressions ----------------------------------------------------------------------------

    def visit_Constant(self, node):
        v = node.value
        if v is None:
            return Static(None)
        if isinstance(v, (bool, int, float)):
            return Const(v)
        raise self.error(node, f"{type(v).__name__} constants are not supported in kernels")

    def visit_Name(self, node):
        return self.read_name(node)

    def read_name(self, node):
        binding = self.env.get(node.id)
        if binding is not None:
            return self.read_binding(binding)
        if node.id in self.cap.assign_counts:
            raise self.error(node, f"'{node.id}' is read before it is assigned",
                             help="assign it before this line (before the loop, for a value "
                                  "carried between iterations)")
        value = self.cap.resolve(node.id)
        if value is MISSING:
            raise self.error(node, f"name '{node.id}' is not defined")
        return self.from_python(value, node)

    def from_python(self, value, node):
        try:
            return intrinsics.from_python(value)
        except TypingError as exc:
            raise self.error(node, str(exc), exc.help) from None

    def is_static(self, node, obj) -> bool:
        try:
            v = self.visit(node)
        except CompileError:
            return False
        return isinstance(v, Static) and v.obj is obj

    def visit_Attribute(self, node):
        value = self.visit(node.value)
        return self.ctx.dialect.attribute(self, value, node.attr, node)

    def visit_Tuple(self, node):
        return TupleValue(tuple(self.visit(e) for e in node.elts))

    def visit_GeneratorExp(self, node):
        """``(expr for i in range(...) ...)`` over constant ranges: unrolled at compile time
        into a tuple (``tuple(...)`` of it is the same tuple), e.g. fragment registers."""
        return TupleValue(tuple(self.unrolled(node.elt, node.generators)))

    def unrolled(self, elt, generators):
        if not generators:
            yield self.visit(elt)
            return
        gen, rest = generators[0], generators[1:]
        it = gen.iter
        if gen.is_async or not isinstance(gen.target, ast.Name) or not (
                isinstance(it, ast.Call) and self.is_static(it.func, range) and not it.keywords
                and 1 <= len(it.args) <= 3):
            raise self.error(gen, "a generator expression in a kernel runs over "
                                  "range(...) of constants into a plain name",
                             help="it is unrolled at compile time: (f(i) for i in range(4))")
        bounds = [self.visit(a) for a in it.args]
        if not all(isinstance(v, Const) and isinstance(v.value, int) for v in bounds):
            raise self.error(it, "the range of a generator expression must be constant ints")
        name = gen.target.id
        saved = self.env.get(name)
        try:
            for i in range(*(v.value for v in bounds)):
                self.env[name] = Bound(Const(i))
                conds = [self.truth(c) for c in gen.ifs]
                if not all(isinstance(c, Const) for c in conds):
                    raise self.error(gen, "conditions of a generator expression in a kernel "
                                          "must be constant")
                if all(c.value for c in conds):
                    yield from self.unrolled(elt, rest)
        finally:
            if saved is None:
                self.env.pop(name, None)
            else:
                self.env[name] = saved

    def visit_BinOp(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported")
        return self.emit.binary(op, self.visit(node.left), self.visit(node.right))

    def visit_UnaryOp(self, node):
        operand = self.visit(node.operand)
        if isinstance(node.op, ast.UAdd):
            self.emit.dtype_of(operand)
            return operand
        if isinstance(node.op, ast.Not):
            truth = self.emit.truth(operand)
            return Const(not truth.value) if isinstance(truth, Const) else \
                self.emit.unary(Op.NOT, truth)
        return self.emit.unary(Op.NEG if isinstance(node.op, ast.USub) else Op.NOT, operand)

    def visit_Compare(self, node):
        result, left = None, self.visit(node.left)
        for op, comp in zip(node.ops, node.comparators):
            pred = _CMPOPS.get(type(op))
            if pred is None:
                raise self.error(node, f"comparison {type(op).__name__} is not supported")
            right = self.visit(comp)
            cmp = self.emit.compare(pred, left, right)
            result = cmp if result is None else self.emit.binary(Op.AND, result, cmp)
            left = right
        return result

    def visit_BoolOp(self, node):
        # Short-circuit: `i < n and x[i] > 0` must not read x[i] when i >= n.
        is_and = isinstance(node.op, ast.And)
        first = self.truth(node.values[0])
        if isinstance(first, Const):
            if first.value != is_and:
                return first
            rest = node.values[1:]
            if len(rest) == 1:
                return self.truth(rest[0])
            return self.visit(ast.copy_location(ast.BoolOp(node.op, rest), node))
        key = f"{self.prefix}<bool@{node.lineno}:{node.col_offset}>"
        ref = self.ctx.slot(key, T.BOOL)
        self.b.create(Op.LOCAL_STORE, [ref, first])
        for value in node.values[1:]:
            current = self.b.create(Op.LOCAL_LOAD, [ref]).result
            if not is_and:
                current = self.emit.unary(Op.NOT, current)
            then = Region()
            self.b.create(Op.SCF_IF, [current], regions=[then, Region()])
            with self.b.at(then):
                nxt = self.truth(value)
                if isinstance(nxt, Const):
                    nxt = self.emit.constant(nxt.value, T.BOOL.dtype)
                self.b.create(Op.LOCAL_STORE, [ref, nxt])
        return self.b.create(Op.LOCAL_LOAD, [ref]).result

    def visit_IfExp(self, node):
        cond = self.truth(node.test)
        if isinstance(cond, Const):
            return self.visit(node.body if cond.value else node.orelse)
        then, other = Region(), Region()
        self.b.create(Op.SCF_IF, [cond], regions=[then, other])
        with self.b.at(then):
            a = self.visit(node.body)
        with self.b.at(other):
            c = self.visit(node.orelse)
        key = f"{self.prefix}<ifexp@{node.lineno}:{node.col_offset}>"
        ta, tc = _type_or_marker(a), _type_or_marker(c)
        ref = self.ctx.slot(key, join([ta, tc]))
        for region, v in ((then, a), (other, c)):
            with self.b.at(region):
                stored = self.emit.implicit(v, ref.type.elem, "the conditional expression")
                self.b.create(Op.LOCAL_STORE, [ref, stored])
        return self.b.create(Op.LOCAL_LOAD, [ref]).result

    def visit_Call(self, node):
        func = self.visit(node.func)
        if isinstance(func, Static) and func.obj is float and len(node.args) == 1 \
                and not node.keywords and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            return self.float_of_text(node.args[0])
        if isinstance(func, Static) and getattr(func.obj, "__fearless_func__", False):
            return funcs.call(self, func.obj, node)
        return self.ctx.dialect.call(self, func, node)

    def float_of_text(self, node):
        """``float("inf")``, ``float("-inf")``, ``float("nan")``: a constant, as Python parses it
        (the only place a kernel takes a string)."""
        try:
            return Const(float(node.value))
        except ValueError:
            raise self.error(node, f"float() of {node.value!r} is not a number",
                             help='write float("inf"), float("-inf"), float("nan") or a number'
                             ) from None

    def visit_Subscript(self, node):
        value = self.visit(node.value)
        if isinstance(value, TupleValue):
            index = self.visit(node.slice)
            if not (isinstance(index, Const) and isinstance(index.value, int)):
                raise self.error(node.slice, "tuples are indexed by constant integers")
            try:
                return value.items[index.value]
            except IndexError:
                raise self.error(node.slice, f"tuple index {index.value} out of range") from None
        return self.load(value, self.visit_indices(node.slice), node)

    # array access ---------------------------------------------------------------------------

    def visit_indices(self, node) -> tuple[list, tuple]:
        """The index values of a subscript, and the source span of each (for diagnostics)."""
        if isinstance(node, ast.Slice):
            raise self.error(node, "slices are not supported inside kernels",
                             help="index one element at a time, or slice on the host")
        value = self.visit(node)
        items = list(value.items) if isinstance(value, TupleValue) else [value]
        out = []
        for item in items:
            if isinstance(item, Const):
                if not isinstance(item.value, int) or isinstance(item.value, bool):
                    raise self.error(node, f"index {item.value!r} is not an integer")
                if item.value < 0:
                    raise self.error(node, "negative indices do not wrap around in kernels",
                                     help="write len(x) - 1 instead of -1")
            elif isinstance(item, Value) and isinstance(item.type, T.ThreadIndex):
                pass
            else:
                d = self.emit.dtype_of(item)
                if not d.is_int:
                    raise self.error(node, f"array index must be an integer, not {d}")
            out.append(item)
        parts = node.elts if isinstance(node, ast.Tuple) and len(node.elts) == len(out) else \
            [node] * len(out)
        return out, tuple(self.span(p) for p in parts)

    def index_operands(self, array: Value, indices: list, node) -> list:
        if len(indices) != array.type.ndim:
            raise self.error(node, f"{array.type.ndim}-d array indexed with {len(indices)} "
                                   f"indices")
        keep = {T.Access.DISJOINT: False, T.Access.SHARED: True}.get(array.type.access)
        return [i if keep is not None and isinstance(i, Value)
                and isinstance(i.type, T.ThreadIndex) and i.type.block == keep
                else self.emit.scalar(i, T.INDEX.dtype) for i in indices]

    def array(self, value, node) -> Value:
        if isinstance(value, Value) and isinstance(value.type, T.TensorView):
            raise self.error(node, "tile kernels do not index tensors element by element",
                             help="load a tile (ft.load, ft.load_like) and write the block's own "
                                  "tile (out.store)")
        if isinstance(value, Value) and isinstance(value.type, T.Tile):
            raise self.error(node, "tiles cannot be indexed element by element",
                             help="work on whole tiles: ft.where, reductions, ft.reshape")
        if not (isinstance(value, Value) and isinstance(value.type, T.Array)):
            raise self.error(node, f"{describe(value)} cannot be indexed")
        return value

    def load(self, array, indices, node, rmw=False):
        indices, spans = indices
        array = self.array(array, node)
        operands = self.index_operands(array, indices, node)
        attrs = {"checked": False, "index_spans": spans, **self.unsafe_attr(),
                 **({"rmw": True} if rmw else {})}
        return self.b.create(Op.MEM_LOAD, [array, *operands], attrs=attrs).result

    def store(self, array, indices, value, node, rmw=False):
        indices, spans = indices
        array = self.array(array, node)
        if array.type.access is T.Access.ATOMIC:
            raise self.error(node, "an AtomicSlice is changed only through its atomic methods",
                             help=f"write {describe_rmw(node)}")
        operands = self.index_operands(array, indices, node)
        stored = self.emit.implicit(value, T.Scalar(array.type.dtype), "an array element")
        attrs = {"index_spans": spans, **self.unsafe_attr(), **({"rmw": True} if rmw else {})}
        self.b.create(Op.MEM_STORE, [array, *operands, stored], attrs=attrs)

    def unsafe_attr(self) -> dict:
        """``{"unsafe": True}`` for ops written inside ``with fl.unsafe():``, else nothing."""
        return {"unsafe": True} if self.unsafe_depth > 0 else {}


def describe_rmw(node) -> str:
    """The atomic call that replaces ``a[i] += v`` (for help lines)."""
    if isinstance(node, ast.Subscript):
        return f"{ast.unparse(node.value)}.add({ast.unparse(node.slice)}, v)"
    return "a.add(i, v)"


def generate(cap: Captured, params: list[tuple[str, T.Type]], var_types: dict,
             dialect: Dialect = SIMT, constants: dict | None = None) -> Function:
    """The IR of kernel ``cap`` for parameter types ``params``, its variables of the types
    ``var_types`` (slot key -> type: ``typing.infer``'s ``Types.slots``). Raises CompileError.

    ``constants`` binds compile-time parameters (a tile kernel's ``ft.Const``) by name; they
    are not parameters of the IR function.
    """
    ctx = GenContext(cap.name, var_types, Builder(Region()), dialect=dialect)
    return walk(ctx, cap, params, constants or {})


def walk(ctx: GenContext, cap: Captured, params, constants) -> Function:
    """One walk of the kernel in ``ctx``: a typing round or the emission."""
    gen = FunctionGen(ctx, cap)
    ir_params = []
    nodes = {a.arg: a for a in cap.tree.args.args}
    for name, value in constants.items():
        if cap.assign_counts[name] > 1:
            raise CompileError(f"compile-time parameter '{name}' is assigned in the kernel",
                               kernel=cap.name, span=cap.span(nodes[name]))
        gen.env[name] = Bound(intrinsics.from_python(value))
    for name, type_ in params:
        node = nodes[name]
        value = Value(type_, name)
        ir_params.append(Param(name, type_, value, cap.span(node)))
        gen.bind_param(name, value, node)
    gen.body(cap.tree.body)
    body = ctx.builder.region
    body.ops[:0] = ctx.entry
    return Function(cap.name, ir_params, body, {})
