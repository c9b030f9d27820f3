"""Logging for the long-running processes with every URL password masked, tracebacks included.

The dataset manager logs what failed while materialising, and a driver's error (or its traceback) may quote
the datasource URL with its password. The filter sits on the handlers, so it masks whatever logger wrote the
record; ``model.masking.mask_url`` is the one masking function.
"""

from __future__ import annotations

import logging

from phalanx.model.masking import mask_url


class MaskingFilter(logging.Filter):
    """Rewrites a record's message and traceback text with ``mask_url``; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask the record in place; always True."""
        message = record.getMessage()
        masked = mask_url(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            # What the handler's formatter would write; set here so that it writes the masked text instead.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_url(record.exc_text)
        if record.stack_info:
            record.stack_info = mask_url(record.stack_info)
        return True


def mask_log_handlers(logger: logging.Logger | None = None) -> None:
    """Add a ``MaskingFilter`` to every handler of ``logger`` (the root logger by default)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, MaskingFilter) for f in handler.filters):
            handler.addFilter(MaskingFilter())
