"""An incremental web crawler that learns which URLs deserve its polling budget."""

__version__ = "0.1.0"
