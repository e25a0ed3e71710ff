"""structlog JSON logs on stderr; stdlib logging (pysyncobj, grpc) goes the same way."""
from __future__ import annotations

import logging
import sys

import structlog

_SHARED = [
    structlog.contextvars.merge_contextvars,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def configure_logging(level: str = "info") -> None:
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_SHARED, structlog.stdlib.add_logger_name],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.JSONRenderer()],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.add_logger_name, structlog.processors.format_exc_info,
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
