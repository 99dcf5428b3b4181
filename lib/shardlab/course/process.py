"""Which interpreter is this: a fresh kernel proves itself by pid and start time."""


def process_identity() -> dict:
    """This interpreter's pid and start time: two kernels never share both."""
    import psutil

    process = psutil.Process()
    return {"pid": process.pid, "started": process.create_time()}
