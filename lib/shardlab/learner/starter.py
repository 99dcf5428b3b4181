"""`python -m shardlab starter FILE`: copy the starter template out for a learner, never over a file."""

import os
import sys
from importlib import resources

TEMPLATE = "starter.py"


def template_text() -> str:
    """The starter template shipped inside the package (learner/templates/starter.py)."""
    return resources.files("shardlab.learner").joinpath("templates", TEMPLATE).read_text(encoding="utf-8")


def write_starter(path) -> str:
    """Write the template to `path`, which must not exist yet; return the absolute path."""
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "x", encoding="utf-8") as handle:  # "x": an existing file is never overwritten
        handle.write(template_text())
    return path


def add_arguments(parser) -> None:
    parser.add_argument("path", help="the new file for your implementation, e.g. my_model.py")


def main(args) -> int:
    try:
        path = write_starter(args.path)
    except FileExistsError:
        print(
            f"[shardlab starter] {args.path} already exists; it was left untouched. Choose another name "
            "(your work is never overwritten).",
            file=sys.stderr,
        )
        return 1
    print(
        f"[shardlab starter] wrote {path}\nnext: implement stage 1, then\n"
        f"  python -m shardlab check --implementation {args.path} --stage 1"
    )
    return 0
