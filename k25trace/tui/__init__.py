"""``k25trace tui``: a Textual front end over :mod:`.analysis.browse` (captures → steps → kernels, ad-hoc SQL)."""
