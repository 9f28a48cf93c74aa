"""Rendering: turn the analysis frames into text, tables, HTML pages and export files; no SQL of its own."""
