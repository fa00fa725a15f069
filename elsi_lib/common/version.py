"""elsi's version, in one place: the package, its caches' keys and its records read it."""

__version__ = "0.1.1"
