"""`python -m shardlab multi`: the group launched once, compared with one process (`supervise --budget 0`)."""

from shardlab.multi import cli


def add_arguments(parser) -> None:
    cli.add_arguments(parser, budget=0)


main = cli.main
