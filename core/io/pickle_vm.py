"""A restricted pickle machine: rebuilds plain data from a pickle without importing or calling anything
the pickle names.

Python's own unpickler imports every global a pickle mentions and calls it, which runs arbitrary
code. This machine implements the opcodes of protocols 2-5 that carry data, and resolves a global
only through `resolve(module, name)`, supplied by the caller: it returns a python function the caller
vouches for, or None, in which case the global becomes an inert `PickleRecord`. Calling a record
(REDUCE/NEWOBJ) makes another record that keeps the arguments; BUILD stores the state on it.
Every failure is a FormatError; reads never go past the data, so sizes stay bounded by the input.

Depth: the machine itself never recurses, but Python does on what it builds: hashing a tuple nested a
million deep (as a dict key or set member) overflows the C stack (SIGSEGV), and repr/compare raise
RecursionError. So every container the machine makes carries its nesting depth, and one deeper than
ember.limits.budget.pickle_depth is a LimitError at the opcode that builds it. Tuples and frozensets
(the only containers that get hashed) are immutable and built bottom-up, so their depth is exact; a
list or dict deepened after being nested only makes its own depth grow, which can under-count its
parents, but those are unhashable and every ember walk over the tree is iterative.

Work: a shallow pickle can still make hashing cost more than the file is long. Each tuple built from two
references to the one before (the memo lets a pickle name an object twice), 64 levels deep, is 2^64 nodes
when expanded, which is what hashing it (as a dict key or set member) walks. So every container also carries
its expanded size (saturating), and the machine charges what each hash will walk against
ember.limits.budget.pickle_work before Python hashes it: a dict key, a set or frozenset member, and the
members a pickled set()/frozenset()/OrderedDict() call hashes. The walks ember does itself (state_dict,
module_state_dict) visit each container once however often it is referenced.
"""
from __future__ import annotations

import struct

from ..errors import LimitError
from ..limits import budget
from .formats import FormatError


class PickleRecord:
    """An object of a class ember does not know, kept as data: never imported, never called.

    module, name: the pickled global ('ultralytics.nn.tasks', 'DetectionModel');
    args: the constructor arguments (None for a bare reference to the global);
    state: what BUILD set (for a torch nn.Module: its __dict__, with _parameters/_buffers/_modules);
    items: values appended, and (key, value) pairs set, on a list- or dict-like object.
    """
    __slots__ = ("module", "name", "args", "state", "items")

    def __init__(self, module, name, args=None, state=None):
        self.module, self.name, self.args, self.state, self.items = module, name, args, state, []

    def __repr__(self):
        return f"PickleRecord({self.module}.{self.name})"


class _Mark:  # MARK's position on the stack
    __slots__ = ()


_MARK = _Mark()


class Machine:
    """Run one pickle: `Machine(data, resolve, persistent_load, where).run()` -> the pickled object."""

    def __init__(self, data: bytes, resolve, persistent_load, where: str):
        self.data, self.pos, self.where = data, 0, where
        self.resolve, self.persistent_load = resolve, persistent_load
        self.stack, self.memo = [], {}
        # id(container) -> (container, nesting depth, expanded size in nodes)
        self.depths, self.max_depth = {}, budget.pickle_depth
        self.work, self.max_work = 0, budget.pickle_work  # nodes the hashes so far walk
        self.ops = {op: getattr(self, "op_" + name) for op, name in _OPCODES.items()}

    # ---- plumbing
    def fail(self, msg):
        return FormatError(f"ember: {self.where}: {msg} (pickle byte {self.pos})")

    def take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"pickle is truncated (wants {n} bytes, {len(self.data) - self.pos} left)")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt):
        (v,) = struct.unpack(fmt, self.take(struct.calcsize(fmt)))
        return v

    def line(self):
        end = self.data.find(b"\n", self.pos)
        if end < 0:
            raise self.fail("pickle is truncated (unterminated text field)")
        b = self.data[self.pos:end]
        self.pos = end + 1
        return b

    def pop(self):
        if not self.stack or self.stack[-1] is _MARK:
            raise self.fail("pickle stack underflow")
        return self.stack.pop()

    def top(self):
        if not self.stack or self.stack[-1] is _MARK:
            raise self.fail("pickle stack underflow")
        return self.stack[-1]

    def pop_mark(self):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] is _MARK:
                items = self.stack[i + 1:]
                del self.stack[i:]
                return items
        raise self.fail("pickle has no MARK to pop to")

    def depth(self, v) -> int:
        e = self.depths.get(id(v))
        return e[1] if e is not None and e[0] is v else 0

    def size(self, v) -> int:
        """v's expanded size in nodes (a container counts each reference to a child again; an atom is 1)."""
        e = self.depths.get(id(v))
        return e[2] if e is not None and e[0] is v else 1

    def nest(self, obj, children, grow=False):
        """Record obj as a container of children (grow: children added to an existing one) -> obj."""
        d = 1 + max(map(self.depth, children), default=0)
        n = 1 + sum(map(self.size, children))
        if grow:
            d, n = max(d, self.depth(obj)), n - 1 + self.size(obj)
        if d > self.max_depth:
            raise LimitError(self.where, f"pickle nesting depth (at pickle byte {self.pos})", d, self.max_depth,
                             "pickle_depth")
        # (saturating: a sum past the budget is refused where it is hashed, and stays a small int)
        self.depths[id(obj)] = (obj, d, min(n, self.max_work + 1))  # holds obj: its id is never reused
        return obj

    def hashing(self, values):
        """Charge what hashing each of `values` walks (a tuple or frozenset: its expanded size) before it is done."""
        for v in values:
            if isinstance(v, (tuple, frozenset)):
                self.work += self.size(v)
                if self.work > self.max_work:
                    raise LimitError(self.where, f"pickle hashing work: nodes walked to hash dict keys and set "
                                                 f"members (at pickle byte {self.pos})", self.work, self.max_work,
                                     "pickle_work")

    def push(self, obj, children=()):
        self.stack.append(self.nest(obj, children))

    def run(self):
        try:
            while True:
                if self.pos >= len(self.data):
                    raise self.fail("pickle ends without STOP")
                op = self.data[self.pos]
                self.pos += 1
                f = self.ops.get(op)
                if f is None:
                    raise self.fail(f"unsupported pickle opcode {bytes([op])!r}")
                if f():
                    return self.pop()
        except FormatError:
            raise
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError, RecursionError,
                UnicodeDecodeError, struct.error) as e:
            # a malformed pickle (e.g. an unhashable dict key, wrong argument count to a rebuild function)
            raise self.fail(f"malformed pickle: {type(e).__name__}: {e}") from None

    # ---- framing and stack
    def op_proto(self):
        if self.take(1)[0] > 5:
            raise self.fail("pickle protocol above 5")

    def op_frame(self):
        self.take(8)

    def op_stop(self):
        return True

    def op_mark(self):
        self.stack.append(_MARK)

    def op_pop(self):
        if self.stack and self.stack[-1] is _MARK:
            self.stack.pop()
        else:
            self.pop()

    def op_pop_mark(self):
        self.pop_mark()

    def op_dup(self):
        self.stack.append(self.top())

    # ---- memo
    def _put(self, i):
        self.memo[i] = self.top()

    def _get(self, i):
        if i not in self.memo:
            raise self.fail(f"pickle reads memo slot {i}, never written")
        self.stack.append(self.memo[i])

    def op_put(self):
        self._put(int(self.line()))

    def op_binput(self):
        self._put(self.take(1)[0])

    def op_long_binput(self):
        self._put(self.unpack("<I"))

    def op_memoize(self):
        self._put(len(self.memo))

    def op_get(self):
        self._get(int(self.line()))

    def op_binget(self):
        self._get(self.take(1)[0])

    def op_long_binget(self):
        self._get(self.unpack("<I"))

    # ---- atoms
    def op_none(self):
        self.stack.append(None)

    def op_newtrue(self):
        self.stack.append(True)

    def op_newfalse(self):
        self.stack.append(False)

    def op_int(self):
        s = self.line()
        self.stack.append(True if s == b"01" else False if s == b"00" else int(s))  # protocol 0 booleans

    def op_binint(self):
        self.stack.append(self.unpack("<i"))

    def op_binint1(self):
        self.stack.append(self.take(1)[0])

    def op_binint2(self):
        self.stack.append(self.unpack("<H"))

    def op_long(self):
        self.stack.append(int(self.line().rstrip(b"L")))

    def op_long1(self):
        self.stack.append(int.from_bytes(self.take(self.take(1)[0]), "little", signed=True))

    def op_long4(self):
        self.stack.append(int.from_bytes(self.take(self.unpack("<i")), "little", signed=True))

    def op_float(self):
        self.stack.append(float(self.line()))

    def op_binfloat(self):
        self.stack.append(self.unpack(">d"))

    def op_binunicode(self):
        self.stack.append(self.take(self.unpack("<I")).decode("utf-8", "surrogatepass"))

    def op_short_binunicode(self):
        self.stack.append(self.take(self.take(1)[0]).decode("utf-8", "surrogatepass"))

    def op_binunicode8(self):
        self.stack.append(self.take(self.unpack("<Q")).decode("utf-8", "surrogatepass"))

    def op_unicode(self):
        self.stack.append(self.line().decode("raw-unicode-escape"))

    def op_binstring(self):  # python 2 str: kept as text, as torch.load(encoding='latin1') does
        self.stack.append(self.take(self.unpack("<i")).decode("latin1"))

    def op_short_binstring(self):
        self.stack.append(self.take(self.take(1)[0]).decode("latin1"))

    def op_binbytes(self):
        self.stack.append(self.take(self.unpack("<I")))

    def op_short_binbytes(self):
        self.stack.append(self.take(self.take(1)[0]))

    def op_binbytes8(self):
        self.stack.append(self.take(self.unpack("<Q")))

    def op_bytearray8(self):
        self.stack.append(bytearray(self.take(self.unpack("<Q"))))

    # ---- containers
    def op_empty_list(self):
        self.stack.append([])

    def op_list(self):
        items = self.pop_mark()
        self.push(items, items)

    def op_empty_tuple(self):
        self.stack.append(())

    def op_tuple(self):
        items = tuple(self.pop_mark())
        self.push(items, items)

    def op_tuple1(self):
        t = (self.pop(),)
        self.push(t, t)

    def op_tuple2(self):
        b, a = self.pop(), self.pop()
        self.push((a, b), (a, b))

    def op_tuple3(self):
        c, b, a = self.pop(), self.pop(), self.pop()
        self.push((a, b, c), (a, b, c))

    def op_empty_dict(self):
        self.stack.append({})

    def op_dict(self):
        items = self.pop_mark()
        if len(items) % 2:
            raise self.fail("DICT with an odd number of items")
        self.nest(items, items)  # checked before hashing the keys
        self.hashing(items[::2])
        self.push(dict(zip(items[::2], items[1::2])), items)

    def op_empty_set(self):
        self.stack.append(set())

    def op_frozenset(self):
        items = self.pop_mark()
        self.nest(items, items)
        self.hashing(items)
        self.push(frozenset(items), items)

    def _extend(self, target, values):
        self.nest(target, values, grow=True)
        if isinstance(target, list):
            target.extend(values)
        elif isinstance(target, PickleRecord):
            target.items.extend(values)
        else:
            raise self.fail(f"APPEND onto a {type(target).__name__}")

    def op_append(self):
        v = self.pop()
        self._extend(self.top(), [v])

    def op_appends(self):
        vs = self.pop_mark()
        self._extend(self.top(), vs)

    def _setitems(self, target, kv):
        if len(kv) % 2:
            raise self.fail("SETITEMS with an odd number of items")
        self.nest(target, kv, grow=True)  # before hashing the keys
        if isinstance(target, dict):
            self.hashing(kv[::2])
        pairs = list(zip(kv[::2], kv[1::2]))
        if isinstance(target, dict):
            target.update(pairs)
        elif isinstance(target, PickleRecord):
            target.items.extend(pairs)
        else:
            raise self.fail(f"SETITEM onto a {type(target).__name__}")

    def op_setitem(self):
        v, k = self.pop(), self.pop()
        self._setitems(self.top(), [k, v])

    def op_setitems(self):
        kv = self.pop_mark()
        self._setitems(self.top(), kv)

    def op_additems(self):
        items = self.pop_mark()
        target = self.top()
        if not isinstance(target, set):
            raise self.fail(f"ADDITEMS onto a {type(target).__name__}")
        self.nest(target, items, grow=True)
        self.hashing(items)
        target.update(items)

    # ---- globals, calls, state: only through resolve(); everything else stays a record
    def _global(self, module, name):
        if not (isinstance(module, str) and isinstance(name, str)):
            raise self.fail("STACK_GLOBAL needs two strings")
        f = self.resolve(module, name)
        self.stack.append(PickleRecord(module, name) if f is None else f)

    def op_global(self):
        module = self.line().decode("utf-8")
        self._global(module, self.line().decode("utf-8"))

    def op_stack_global(self):
        name, module = self.pop(), self.pop()
        self._global(module, name)

    def _call(self, f, args, kwargs=None):
        if not isinstance(args, tuple) or not (kwargs is None or isinstance(kwargs, dict)):
            raise self.fail("call arguments are not a tuple")
        children = (args, kwargs)
        if isinstance(f, PickleRecord):
            return self.nest(PickleRecord(f.module, f.name, args if not kwargs else args + (kwargs,)), children)
        if not callable(f) or not getattr(f, "_pickle_safe", False):
            raise self.fail(f"pickle calls a {type(f).__name__}, which is not a class or function")
        self.nest(args, args)  # the arguments are checked before f hashes them (set, frozenset)
        if getattr(f, "_pickle_hashes", False):  # set(items), frozenset(items), OrderedDict(pairs)
            for a in args:
                if isinstance(a, (list, tuple, set, frozenset)):
                    self.hashing(a)
        out = f(*args, **(kwargs or {}))
        return self.nest(out, children) if isinstance(out, (tuple, list, dict, set, frozenset, slice)) else out

    def op_reduce(self):
        args, f = self.pop(), self.pop()
        self.stack.append(self._call(f, args))

    def op_newobj(self):
        args, cls = self.pop(), self.pop()
        self.stack.append(self._call(cls, args))

    def op_newobj_ex(self):
        kwargs, args, cls = self.pop(), self.pop(), self.pop()
        self.stack.append(self._call(cls, args, kwargs))

    def op_build(self):
        state = self.pop()
        inst = self.top()
        if isinstance(inst, PickleRecord):
            self.nest(inst, (state,), grow=True)
            inst.state = state
        elif not isinstance(inst, dict):  # OrderedDict state (e.g. a state_dict's _metadata) is dropped
            raise self.fail(f"BUILD on a {type(inst).__name__}")

    def op_binpersid(self):
        self.stack.append(self.persistent_load(self.pop()))


def safe(f):
    """Mark a function as callable from a pickle (REDUCE/NEWOBJ); nothing else is ever called."""
    f._pickle_safe = True
    return f


def safe_hashing(f):
    """safe(f) for a function that hashes the members of its list/tuple/set arguments (set, frozenset, a
    dict from pairs): the machine charges that work (Machine.hashing) before calling it."""
    f._pickle_hashes = True
    return safe(f)


_OPCODES = {
    b"\x80": "proto", b"\x95": "frame", b".": "stop", b"(": "mark", b"0": "pop", b"1": "pop_mark", b"2": "dup",
    b"p": "put", b"q": "binput", b"r": "long_binput", b"\x94": "memoize",
    b"g": "get", b"h": "binget", b"j": "long_binget",
    b"N": "none", b"\x88": "newtrue", b"\x89": "newfalse", b"I": "int", b"J": "binint", b"K": "binint1",
    b"M": "binint2", b"L": "long", b"\x8a": "long1", b"\x8b": "long4", b"F": "float", b"G": "binfloat",
    b"X": "binunicode", b"\x8c": "short_binunicode", b"\x8d": "binunicode8", b"V": "unicode",
    b"T": "binstring", b"U": "short_binstring", b"B": "binbytes", b"C": "short_binbytes",
    b"\x8e": "binbytes8", b"\x96": "bytearray8",
    b"]": "empty_list", b"l": "list", b")": "empty_tuple", b"t": "tuple", b"\x85": "tuple1", b"\x86": "tuple2",
    b"\x87": "tuple3", b"}": "empty_dict", b"d": "dict", b"\x8f": "empty_set", b"\x91": "frozenset",
    b"a": "append", b"e": "appends", b"s": "setitem", b"u": "setitems", b"\x90": "additems",
    b"c": "global", b"\x93": "stack_global", b"R": "reduce", b"\x81": "newobj", b"\x92": "newobj_ex",
    b"b": "build", b"Q": "binpersid",
}
_OPCODES = {k[0]: v for k, v in _OPCODES.items()}
