"""The documentation site's pages and the wall-clock pages, generated from the committed results."""
