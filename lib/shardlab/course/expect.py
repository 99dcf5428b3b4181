"""What a notebook cell insists on: a call that must be refused with a named error."""


def _refused(error_type: type, wanted: str, call, args: tuple, kwargs: dict) -> str:
    """Run `call(*args, **kwargs)`; return "ErrorType: message" if it raises `error_type`, else AssertionError."""
    try:
        call(*args, **kwargs)
    except error_type as exc:
        message = f"{type(exc).__name__}: {exc}"
        print(message)
        return message
    raise AssertionError(f"{getattr(call, '__name__', call)} should have {wanted}, but returned")


def refusal(call, *args, **kwargs) -> str:
    """Run `call(*args, **kwargs)`; return "ErrorType: message" if it raises one of shardlab's own errors.

    The cell that uses it names no error type, so a prediction of which one is not answered by its source.
    Any other exception propagates; a call that returns is an AssertionError.
    """
    from shardlab.errors import ShardlabError

    return _refused(ShardlabError, "refused its input", call, args, kwargs)
