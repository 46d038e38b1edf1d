"""The one error kvlib raises on purpose."""


class KVLibError(ValueError):
    """Bad input or an unavailable model or device; the message says what to do."""
