"""The one error kvlib raises on purpose, and the one rule for a count given as input."""

import numbers


class KVLibError(ValueError):
    """Bad input or an unavailable model or device; the message says what to do."""


def is_count(x):  # a whole number (a Python or numpy int), not a bool and not a float that happens to be whole
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_number(x):  # a real number (numpy's too), not a bool
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def check_count(value, what, least=1):  # -> value, once it is a whole number of at least `least`
    if not is_count(value) or value < least:
        raise KVLibError(f"{what} must be a whole number, at least {least}, not {value!r}")
    return value
