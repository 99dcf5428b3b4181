"""`python -m shardlab multi`: one plain launch of a group, compared with one process (`supervise --budget 0`)."""

from shardlab.multi import cli


def add_arguments(parser) -> None:
    cli.add_arguments(parser, budget=0)


main = cli.main
