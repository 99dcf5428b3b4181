"""Each all_reduce of a lowered step, labelled with what it sums: stage 2's table, read from the StableHLO text.

Every `all_reduce` line names its operand (`%15 = "stablehlo.all_reduce"(%7)`); every value is defined
on an earlier line. Following the definitions back to the block arguments of the `shard_map` body
(`sdy.manual_computation`) gives the step inputs a sum is made of, and the last `tensor<...>` on the
operand's defining line is its type; the two together name the sum.
"""

import re

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
        if "stablehlo.all_reduce" not in line:
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
    opens = next((i for i, line in enumerate(lines) if "stablehlo.all_reduce" in line), None)
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
