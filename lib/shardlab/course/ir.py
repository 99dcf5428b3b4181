"""Each all_reduce of a lowered step, labelled with what it sums: stage 2's table, read from the StableHLO text.

Every `all_reduce` line names its operand (`%15 = "stablehlo.all_reduce"(%7)`); every value is defined
on an earlier line. Following the definitions back to the block arguments of the `shard_map` body
(`sdy.manual_computation`) gives the step inputs a sum is made of, and the last `tensor<...>` on the
operand's defining line is its type; the two together name the sum.
"""

import re

from shardlab.core.update import count_all_reduce
from shardlab.errors import ConfigError

INPUTS = ("features", "targets", "mask", "weights", "momentum")  # the step's arguments, in order


def label_all_reduces(ir_text: str, num_features: int) -> list[dict]:
    """One row per all_reduce: its operand, type, the step inputs it is computed from and what it sums."""
    defined = {}  # SSA name -> the text after "=" on the line that defines it
    for line in ir_text.splitlines():
        if found := re.match(r"\s*(%\w+)(?::\d+)? = (.*)", line):
            defined.setdefault(found[1], found[2])
    body = next((line for line in ir_text.splitlines() if "manual_computation" in line), "")
    block_args = re.findall(r"(%arg\d+): tensor", body.split("manual_axes")[-1]) or [f"%arg{i}" for i in range(5)]
    inputs = dict(zip(block_args, INPUTS))

    def reads(name, seen):
        if name in inputs:
            return {inputs[name]}
        if name in seen:
            return set()
        seen.add(name)
        return set().union(*(reads(n, seen) for n in re.findall(r"%\w+", defined.get(name, ""))))

    rows = []
    for line in ir_text.splitlines():
        if not count_all_reduce(line):
            continue
        operand = (re.search(r"all_reduce\"?\((%\w+)", line) or [None, "?"])[1]
        kind = (re.findall(r"tensor<[^>]*>", defined.get(operand, "")) or ["?"])[-1]
        sources = reads(operand, set())
        groups = (re.search(r"replica_groups = dense<(\[\[[^>]*\]\])>", line) or [None, "?"])[1]
        rows.append(
            {
                "operand": operand,
                "type": kind,
                "computed from": ", ".join(sorted(sources)),
                "sums": _meaning(kind, sources, num_features, _times_two(operand, defined)),
                "replica_groups": groups,
            }
        )
    return rows


def first_all_reduce(ir_text: str) -> tuple[str, str]:
    """The first all_reduce as lowered, from its line to the end of its add region, and its op with its type.

    The block is what the page prints whole; the second string (`%15 = "stablehlo.all_reduce"(%7) : (tensor<f32>)
    -> tensor<f32>`) is the same op on one line, without the region, as the results record it.
    """
    lines = ir_text.splitlines()
    opens = next((i for i, line in enumerate(lines) if count_all_reduce(line)), None)
    if opens is None:
        raise ConfigError("the program holds no stablehlo.all_reduce: wrap the step's body in shard_map and psum")
    closes = next((i for i in range(opens, len(lines)) if lines[i].strip().startswith("})")), None)
    if closes is None:
        raise ConfigError(f"the all_reduce on line {opens + 1} has no closing '}})': pass the whole lowered text")
    op = lines[opens].strip().split(" <{")[0]  # result = "stablehlo.all_reduce"(operand)
    returns = lines[closes].strip().removeprefix("})").strip()  # ": (operand type) -> result type"
    return "\n".join(line.strip() for line in lines[opens : closes + 1]), f"{op} {returns}"


def _times_two(operand: str, defined: dict) -> bool:
    """Is `operand` defined as a product with the constant 2 (broadcast or not), as d(r^2)/dr puts it?"""
    line = defined.get(operand, "")
    if not line.startswith("stablehlo.multiply"):
        return False
    for name in re.findall(r"%\w+", line.split(":")[0]):
        text = defined.get(name, "")
        if text.startswith("stablehlo.broadcast_in_dim"):
            text = defined.get((re.findall(r"%\w+", text) or [""])[0], "")
        if re.match(r"stablehlo.constant dense<2\.0+e\+00>", text):
            return True
    return False


def _meaning(kind: str, sources: set, num_features: int, times_two: bool = False) -> str:
    if sources == {"mask"}:
        return "the valid count N = sum of m"
    if kind == f"tensor<{num_features}xf32>":
        scale = "2 * " if times_two else ""
        return f"the gradient numerator, {scale}sum of m * x_i * r (one per feature i)"
    if kind == "tensor<f32>" and "features" in sources:
        return "the loss numerator, sum of m r^2"
    if kind == f"tensor<{num_features + 2}xf32>":
        return "N and both numerators, packed in one vector"
    return "a sum this table cannot name"


def compiled_all_reduces(hlo_text: str) -> list[str]:
    """Each all-reduce of XLA's compiled HLO, one line each, without the metadata, channel and region names that
    make a line too long to read: what stage 2 sets beside the lowered program to show what the compiler merged."""
    lines = [line for line in hlo_text.splitlines() if re.search(r"\ball-reduce(?:-start)?\(", line)]
    return [re.sub(r",? (metadata=\{[^}]*\}|channel_id=\d+|to_apply=\S+)", "", line).strip() for line in lines]


def all_reduce_places(ir_text: str) -> dict[str, int]:
    """How many all_reduce ops a lowered program holds inside a loop (run once per iteration: a `scan` of K steps
    runs it K times) and outside every loop (run once per call), following the private functions JAX outlines."""
    functions = _functions(ir_text)
    read = {name: _in_loops(lines) for name, lines in functions.items()}
    looped = _called_in_loops({name: calls for name, (_, calls) in read.items()}, set(functions))
    places = [inside or name in looped for name, (ops, _) in read.items() for inside in ops]
    return {"inside a loop": sum(places), "outside every loop": len(places) - sum(places)}


def _functions(ir_text: str) -> dict[str, list[str]]:
    """Each func.func of the text, by name, with its lines."""
    functions, current = {}, None
    for line in ir_text.splitlines():
        if found := re.match(r"\s*func\.func (?:\w+ )?@([\w.$-]+)\(", line):
            current = functions.setdefault(found[1], [])
        if current is not None:
            current.append(line)
    if not functions:
        raise ConfigError("no func.func in the text: pass a program's whole lowered StableHLO (lower(...).as_text())")
    return functions


def _in_loops(lines: list[str]) -> tuple[list[bool], list[tuple[str, bool]]]:
    """One function's all_reduces (each: inside a while region?) and its calls (callee, inside a while region?)."""
    ops, calls = [], []
    depth, loops = 0, []  # brace depth; per open while: [depth before it, whether its regions opened]
    for line in lines:
        inside = bool(loops)
        ops += [inside] * count_all_reduce(line)
        calls += [(callee, inside) for callee in re.findall(r"\bcall @([\w.$-]+)", line)]
        if "stablehlo.while" in line:
            loops.append([depth, False])
        bare = re.sub(r'"[^"]*"', '""', line)  # braces inside strings (shardings) do not nest regions
        depth += bare.count("{") - bare.count("}")
        for loop in loops:
            loop[1] = loop[1] or depth > loop[0]
        loops = [loop for loop in loops if not (loop[1] and depth <= loop[0])]
    return ops, calls


def _called_in_loops(calls: dict[str, list[tuple[str, bool]]], known: set[str]) -> set[str]:
    """The functions called, at any remove, from inside a loop."""
    looped, changed = set(), True
    while changed:
        changed = False
        for caller, edges in calls.items():
            for callee, inside in edges:
                if callee in known and callee not in looped and (inside or caller in looped):
                    looped.add(callee)
                    changed = True
    return looped
